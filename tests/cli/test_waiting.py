"""A slow model request's status line: shown on a terminal after 2 s, with the
session, the seconds and the tokens streamed; erased when the answer comes; never elsewhere."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

from rich.console import Console

from kernos.cli._waiting import SHOW_AFTER, Waits, WaitStatus
from kernos.runtime import SessionEvent
from kernos.testing import FakeOpenAIServer, text
from tests._agents import CONFIG
from tests.cli.test_chat import DEADLINE, Terminal


def event(kind: str, agent: str = "main", sid: str = "s_1", **data: object) -> SessionEvent:
    return SessionEvent(sid, agent, kind, dict(data))


def test_a_request_is_shown_after_two_seconds_with_its_streamed_tokens() -> None:
    waits = Waits()
    waits.see(event("request", model="openai-chat:qwen3"), 100.0)
    assert waits.line(100.0 + SHOW_AFTER - 0.1) is None
    waits.see(event("delta", text="a"), 101.0)
    waits.see(event("delta", text="b"), 101.5)
    assert waits.line(104.2) == "main waiting for openai-chat:qwen3: 4s, 2 tokens streamed"
    waits.see(event("request", agent="explore", sid="s_2", model="m"), 103.0)
    assert waits.line(105.0) == (
        "main waiting for openai-chat:qwen3: 5s, 2 tokens streamed · "
        "explore/s_2 waiting for m: 2s, 0 tokens streamed"
    )
    waits.see(event("tool_call", name="x"), 105.0)  # main's answer came
    waits.see(event("text", agent="explore", sid="s_2"), 105.0)
    assert waits.line(200.0) is None


def test_text_on_the_same_terminal_ends_the_wait_but_held_back_text_does_not() -> None:
    waits = Waits(text_shown=True)
    waits.see(event("request", model="m"), 0.0)
    waits.see(event("delta", text="hidden", background=True), 1.0)
    assert waits.line(3.0) == "main waiting for m: 3s, 1 token streamed"
    waits.see(event("delta", text="shown"), 3.0)
    assert waits.line(10.0) is None


def test_nothing_is_drawn_on_a_non_terminal() -> None:
    file = io.StringIO()
    status = WaitStatus(Console(file=file, force_terminal=False), text_shown=False)
    assert not status.enabled
    status(event("request", model="m"))
    status.close()
    assert file.getvalue() == ""


def test_kernos_run_shows_a_slow_request_on_the_terminal_and_erases_it(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    gate = threading.Event()
    server.script(text("Done at last.", hold=gate))
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(tmp_path / ".kernos")}
    terminal = Terminal(["run", "take your time"], tmp_path, env)
    try:
        terminal.wait_text("main waiting for test: ")
        terminal.wait_text("0 tokens streamed")
        gate.set()
        assert terminal.proc.wait(timeout=DEADLINE) == 0, terminal.text()
        terminal.reader.join(timeout=5)
        raw = terminal.output.decode("utf-8", "replace")
        after = raw[raw.rindex("tokens streamed") :]
        # erased (rich's transient live: the line cleared) before the answer is written
        assert "\x1b[2K" in after.split("Done at last.")[0]
        assert "Done at last." in after
    finally:
        gate.set()
        terminal.close()


def test_kernos_chat_shows_it_during_a_turn(tmp_path: Path, server: FakeOpenAIServer) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    gate = threading.Event()
    server.script(text("Done at last.", hold=gate))
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(tmp_path / ".kernos")}
    terminal = Terminal(["chat"], tmp_path, env)
    try:
        terminal.wait_text("> ")
        terminal.type("take your time\r")
        terminal.wait_text("main waiting for test: ")
        gate.set()
        terminal.wait_text("Done at last.\n")
        terminal.type("\x04")
        assert terminal.proc.wait(timeout=DEADLINE) == 0, terminal.text()
    finally:
        gate.set()
        terminal.close()
