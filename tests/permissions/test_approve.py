"""Answering asked calls: on a terminal (a real pty) with ``y``, ``a`` and ``n`` plus a reason
the model reads; off a terminal refused with ``approval_required`` unless ``--approve GLOB`` or
``--yes`` allows it, for the run's children too."""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path
from typing import Any

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests._agents import CONFIG, agent_is
from tests.cli.test_chat import Terminal
from tests.cli.test_run import kernos

QUESTION = "approve? [y] this call"


def answered(cwd: Path, *flags: str) -> list[dict[str, Any]]:
    """``kernos approvals --all --json`` in ``cwd``: every kept request, newest first."""
    listed = kernos("approvals", "--all", "--json", *flags, cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout)["requests"])


def how(rows: list[dict[str, Any]]) -> list[tuple[str, str, str | None, str | None]]:
    """Each row's tool, state, how it was answered and the reason, oldest first."""
    return [(r["tool"], r["state"], r["answered_how"], r["reason"]) for r in reversed(rows)]


def test_a_terminal_answers_y_a_and_n_with_a_reason(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "notes.md").write_text("colour\nflavour\n")
    server.script(
        tool_call(
            "edit_file",
            {"path": "notes.md", "old_string": "colour", "new_string": "color"},
            when="americanise",
        ),
        tool_call("write_file", {"path": "a.txt", "content": "A\n"}, when="Edited notes.md"),
        tool_call("write_file", {"path": "b.txt", "content": "B\n"}, when="Created a.txt"),
        tool_call(
            "edit_file",
            {"path": "notes.md", "old_string": "flavour", "new_string": "flavor"},
            when="Created b.txt",
        ),
        text("Partly done.", when="the user denied"),
    )
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(tmp_path / ".kernos")}
    terminal = Terminal(["run", "americanise", "-m", "openai-chat:x"], tmp_path, env)
    try:
        terminal.wait_text(QUESTION)
        shown = terminal.text()
        assert "kernos: edit_file needs your approval (agent main; the tool's own default)" in shown
        assert "-colour\n+color" in shown  # the diff, before anything is written
        assert (tmp_path / "notes.md").read_text() == "colour\nflavour\n"
        mark = len(shown)
        terminal.type("y\r")
        terminal.wait_text(QUESTION, after=mark)
        assert "write_file needs your approval" in terminal.since(mark)
        mark = len(terminal.text())
        terminal.type("a\r")  # write_file for the rest of the run: b.txt is not asked about
        terminal.wait_text(QUESTION, after=mark)
        assert "edit_file needs your approval" in terminal.since(mark)
        assert "write_file needs" not in terminal.since(mark)
        mark = len(terminal.text())
        terminal.type("n\r")
        terminal.wait_text("reason (enter to skip): ", after=mark)
        terminal.type("keep British spelling here\r")
        terminal.wait_for(lambda: terminal.proc.poll() is not None, "the run to end")
        assert terminal.proc.returncode == 0, terminal.text()
        assert "Partly done." in terminal.text()
    finally:
        terminal.close()
    assert (tmp_path / "notes.md").read_text() == "color\nflavour\n"
    assert (tmp_path / "a.txt").read_text() == "A\n"
    assert (tmp_path / "b.txt").read_text() == "B\n"
    results = server.tool_results()
    assert results[0] == "Edited notes.md: replaced 1 occurrence."
    assert results[3].startswith(
        "the user denied this edit_file call: keep British spelling here; do not repeat it"
    )
    rows = answered(tmp_path)
    assert how(rows) == [
        ("edit_file", "approved", "terminal", None),
        ("write_file", "approved", "terminal", "a: approved for the rest of the run"),
        ("write_file", "approved", "terminal",
         "answered a earlier: approved for the rest of the run"),
        ("edit_file", "denied", "terminal", "keep British spelling here"),
    ]  # fmt: skip
    assert {r["answered_by"] for r in rows} == {getpass.getuser()}
    assert all(r["answered_at"] >= r["asked_at"] for r in rows)
    assert "-colour\n+color" in rows[-1]["diff"]  # the diff it was asked with is kept
    assert rows[-1]["arguments"]["path"] == "notes.md" and rows[-1]["session_id"]
    # bounded, newest first; the open list stays the waiting ones'
    assert how(answered(tmp_path, "--limit", "1")) == [how(rows)[-1]]
    listed = kernos("approvals", "--history", cwd=tmp_path)
    assert "keep British spelling here" in listed.stdout and "(terminal)" in listed.stdout
    assert kernos("approvals", cwd=tmp_path).stdout == "(no open approval requests)\n"


def test_off_a_terminal_approve_and_yes_allow_asked_calls(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    for flags in ((), ("--approve", "write_*"), ("--yes",)):
        name = f"out{len(flags)}.txt"
        server.script(
            tool_call("write_file", {"path": name, "content": "x\n"}, when=f"write {name}"),
            text("ok"),
        )
        run = kernos("run", f"write {name}", "-m", "openai-chat:x", *flags, cwd=tmp_path,
                     env=server.env())  # fmt: skip
        assert run.returncode == 0, run.stderr
        result = server.tool_results()[-1]
        if flags:
            assert result == f"Created {name} (1 lines, 2 bytes)."
        else:
            assert result.startswith("write_file needs a person's approval and nobody can be")
            assert not (tmp_path / name).exists()
    rows = answered(tmp_path)
    assert how(rows) == [
        ("write_file", "denied", "no one to ask", rows[-1]["reason"]),
        ("write_file", "approved", "flag", "--approve write_*"),
        ("write_file", "approved", "flag", "--yes"),
    ]
    assert rows[-1]["reason"].startswith("write_file needs a person's approval")
    assert rows[-1]["answered_by"] is None and rows[0]["answered_by"] == getpass.getuser()


def test_approve_covers_the_runs_children(server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    spawn = {"prompt": "Write the notes.", "subagent_type": "explore", "name": "notes"}
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "delegate")),
        tool_call(
            "write_file", {"path": "child.txt", "content": "c\n"}, when=agent_is("EXPLORE-AGENT")
        ),
        text("Child wrote it.", when=agent_is("EXPLORE-AGENT", "Created child.txt")),
        text("Done.", when=agent_is("MAIN-AGENT", "Child wrote it.")),
    )
    run = kernos("run", "delegate", "--approve", "write_file", cwd=tmp_path, env=server.env())
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "child.txt").read_text() == "c\n"


def test_chat_asks_on_the_terminal_too(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.script(
        tool_call("write_file", {"path": "c.txt", "content": "chat\n"}, when="save it"),
        text("Saved.", when="Created c.txt"),
    )
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(tmp_path / ".kernos")}
    terminal = Terminal(["chat", "-m", "openai-chat:x"], tmp_path, env)
    try:
        terminal.wait_text("> ")
        terminal.type("save it\r")
        terminal.wait_text(QUESTION)
        assert "+chat" in terminal.text()
        mark = len(terminal.text())
        terminal.type("y\r")
        terminal.wait_text("Saved.", after=mark)
        terminal.type("\x04")  # Ctrl-D leaves
        terminal.wait_for(lambda: terminal.proc.poll() is not None, "the chat to end")
    finally:
        terminal.close()
    assert (tmp_path / "c.txt").read_text() == "chat\n"


def test_a_background_child_is_never_asked_on_the_terminal(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # never waiting: the request is denied at once (tests/permissions/test_durable.py waits)
    (tmp_path / "kernos.toml").write_text(CONFIG + '\n[permissions]\nwait = "0"\n')
    spawn = {"prompt": "Write the notes.", "subagent_type": "explore", "name": "notes",
             "run_in_background": True}  # fmt: skip
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "delegate")),
        text("Started it.", when=agent_is("MAIN-AGENT", "notes")),
        tool_call(
            "write_file", {"path": "bg.txt", "content": "c\n"}, when=agent_is("EXPLORE-AGENT")
        ),
        text("Could not write.", when=agent_is("EXPLORE-AGENT", "never wait")),
        text("The child could not write.", when=agent_is("MAIN-AGENT", "Could not write.")),
    )
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(tmp_path / ".kernos")}
    terminal = Terminal(["run", "delegate"], tmp_path, env)
    try:
        terminal.wait_for(lambda: terminal.proc.poll() is not None, "the run to end")
        assert terminal.proc.returncode == 0, terminal.text()
        assert QUESTION not in terminal.text()
    finally:
        terminal.close()
    assert not (tmp_path / "bg.txt").exists()
    assert any(
        r.startswith("write_file was not run: it needs a person's approval and [permissions] "
                     'wait is "0" (never wait)')
        for r in server.tool_results()
    )  # fmt: skip
