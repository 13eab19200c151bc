"""``kernos chat``: an interactive session on a real pseudo-terminal against
the local model server; Ctrl-C cancels a turn and keeps the session, Ctrl-D leaves."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernos._chat import Line, parse_line
from kernos.testing import FakeOpenAIServer, text, tool_call
from tests import _cli
from tests import _wait as wait
from tests._agents import SPAWN, agent_is
from tests.cli import _pty
from tests.cli._pty import environment

DEADLINE = 60.0
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]|\r")


def test_a_line_is_a_prompt_a_command_or_nothing() -> None:
    assert parse_line("  ") == Line("empty")
    assert parse_line("hello there") == Line("prompt", "hello there")
    assert parse_line(" /TASKS ") == Line("command", "/tasks")
    assert parse_line("/quit") == Line("command", "/exit")
    assert parse_line("/usage") == Line("command", "/usage")
    assert parse_line("/nope") == Line("unknown", "/nope")
    assert parse_line("//etc/hosts is a path") == Line("prompt", "/etc/hosts is a path")
    assert parse_line("/etc is a path") == Line("prompt", "/etc is a path")


class Terminal(_pty.Terminal):
    """A kernos command on a pseudo-terminal, what it wrote read as text."""

    def text(self) -> str:
        return _ANSI.sub("", self.written())

    def since(self, mark: int) -> str:
        return self.text()[mark:]

    def wait_for(self, check: Callable[[], bool], what: str) -> None:
        def seen() -> bool:
            done = check()
            assert done or self.proc.poll() is None, f"exited waiting for {what}:\n{self.text()}"
            return done

        try:
            wait.wait_for(seen, what, DEADLINE)
        except AssertionError as exc:  # with the screen as it is now
            raise AssertionError(f"{exc}:\n{self.text()}") from None

    def wait_text(self, wanted: str, after: int = 0) -> None:
        self.wait_for(lambda: wanted in self.since(after), repr(wanted))


def user_messages(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in request["messages"] if m.get("role") == "user"]


def test_turns_share_one_session_and_ctrl_c_cancels_only_the_turn(
    project: Path, server: FakeOpenAIServer, gate: threading.Event
) -> None:
    server.script(
        text("Hi there, friend.", when="hello"),
        text("This took too long.", when="think long", hold=gate),
        text("Back again.", when="again"),
    )
    # an earlier chat's history, left readable by others: recalled, and made private
    history = project / ".kernos" / "chat_history"
    history.parent.mkdir()
    history.write_text("hello\n", encoding="utf-8")
    history.chmod(0o644)
    terminal = Terminal(["chat"], project, environment(project, server))
    try:
        terminal.wait_text("> ")
        terminal.wait_text("/help lists the commands")
        mark = len(terminal.text())
        terminal.type("\x1b[A")  # up: the last line of the history
        terminal.wait_text("hello", mark)
        terminal.type("\r")
        terminal.wait_text("Hi there, friend.\n", mark)
        terminal.wait_text("> ", mark)

        mark = len(terminal.text())
        terminal.type("/usage\r")
        terminal.wait_text("this chat: tokens:", mark)

        # a turn whose answer does not come: Ctrl-C stops it, and the chat goes on
        mark = len(terminal.text())
        terminal.type("think long\r")
        terminal.wait_for(lambda: len(server.requests) == 2, "the held request")
        terminal.type("\x03")
        terminal.wait_text("turn cancelled; the session goes on", mark)
        terminal.wait_text("> ", mark)
        assert terminal.proc.poll() is None

        # Ctrl-C at the prompt drops the line typed so far and asks again
        mark = len(terminal.text())
        terminal.type("never sent")
        terminal.wait_text("never sent", mark)
        terminal.type("\x03")
        terminal.wait_text("never sent\n> ", mark)
        mark = len(terminal.text())
        terminal.type("again\r")
        terminal.wait_text("Back again.\n", mark)
        last = server.requests[-1]
        # one conversation: the first turn is in it, the cancelled one is not (nor the dropped line)
        assert user_messages(last) == ["hello", "again"]
        assert [m["content"] for m in last["messages"] if m["role"] == "assistant"] == [
            "Hi there, friend."
        ]

        mark = len(terminal.text())
        terminal.type("/tasks\r")
        terminal.wait_text("no child tasks in this session yet", mark)
        terminal.type("/bogus\r")
        terminal.wait_text("/bogus is not a command; /help lists them", mark)

        terminal.type("\x04")  # Ctrl-D leaves
        assert terminal.proc.wait(timeout=DEADLINE) == 0, terminal.text()
        terminal.reader.join(timeout=5)
        assert "tokens:" in terminal.since(mark)
    finally:
        gate.set()
        terminal.close()

    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    lines = history.read_text(encoding="utf-8").splitlines()
    assert "hello" in lines and "again" in lines and "never sent" not in lines

    # the same session and store as `kernos run`: --continue picks the chat up
    server.script(text("Still here.", when="one more"))
    done = _cli.kernos(
        "run",
        "--continue",
        "one more",
        "-q",
        cwd=project,
        env=environment(project, server),
        timeout=DEADLINE,
    )
    assert (done.returncode, done.stdout) == (0, "Still here.\n"), done.stderr
    assert user_messages(server.requests[-1]) == ["hello", "again", "one more"]


def test_a_turn_waits_for_its_background_child_and_tasks_lists_it(
    project: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("Three modules found.", when=agent_is("EXPLORE-AGENT")),
        text("The survey is done.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    terminal = Terminal(["chat", "--agent", "main"], project, environment(project, server))
    try:
        terminal.wait_text("> ")
        mark = len(terminal.text())
        terminal.type("survey it\r")
        # the child's completion is delivered to the session within the turn, as kernos run does
        terminal.wait_text("The survey is done.\n", mark)
        assert "main → task" in terminal.since(mark)  # activity lines, as kernos run shows them
        # and the spawn answer told the model so (not the --no-wait answer)
        assert "delivered to you automatically" in server.tool_results()[0]
        mark = len(terminal.text())
        terminal.type("/tasks\r")
        terminal.wait_for(lambda: "completed" in terminal.since(mark), "the child's row")
        with sqlite3.connect(project / ".kernos" / "kernos.db") as db:
            ((child,),) = db.execute("SELECT id FROM tasks").fetchall()
        row = next(line for line in terminal.since(mark).splitlines() if child in line)
        assert row.split() == [child, "completed", "survey"]
        terminal.type("/exit\r")
        assert terminal.proc.wait(timeout=DEADLINE) == 0, terminal.text()
    finally:
        terminal.close()


def _tgkill(pid: int, tid: int, signum: int) -> None:
    """Send ``signum`` to one thread of ``pid``, as the kernel may route a terminal's SIGINT."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    SYS_TGKILL = 234  # x86-64
    if libc.syscall(SYS_TGKILL, pid, tid, signum) != 0:
        raise OSError(ctypes.get_errno(), "tgkill")


def _blocks_sigint(pid: int, tid: int) -> bool:
    """Whether thread ``tid`` blocks SIGINT (its mask in /proc: bit 1 is signal 2)."""
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:"))
    return bool(int(mask, 16) & 0x2)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="tgkill's number is x86-64's")
def test_ctrl_c_delivered_to_another_thread_still_cancels_the_turn(
    project: Path, server: FakeOpenAIServer, gate: threading.Event
) -> None:
    server.script(
        text("This took too long.", when="think long", hold=gate),
        text("Back again.", when="again"),
    )
    terminal = Terminal(["chat"], project, environment(project, server))
    try:
        terminal.wait_text("/help lists the commands")
        mark = len(terminal.text())
        terminal.type("think long\r")
        terminal.wait_for(lambda: len(server.requests) == 1, "the held request")
        pid = terminal.proc.pid
        others = [
            tid
            for tid in map(int, os.listdir(f"/proc/{pid}/task"))
            if tid != pid and not _blocks_sigint(pid, tid)
        ]
        assert others, "the chat runs its turn on a thread of its own"
        _tgkill(pid, others[0], signal.SIGINT)
        terminal.wait_text("turn cancelled; the session goes on", mark)
        assert "This took too long." not in terminal.since(mark)
        mark = len(terminal.text())
        terminal.type("again\r")
        terminal.wait_text("Back again.", mark)
    finally:
        terminal.close()
