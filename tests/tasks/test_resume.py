"""Resume through the CLI, as real subprocesses against the local model server: ``kernos run
--continue`` / ``--session ID`` send the model the earlier turns, ``kernos sessions`` lists the
sessions, and a child of an earlier run is revived by ``task_send`` with its old context."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is, messages, seen, system, text_of
from tests import _cli

from kernos.testing import FakeOpenAIServer, text, tool_call

KERNOS = str(Path(sys.executable).with_name("kernos"))
SPAWN = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
         "run_in_background": True}  # fmt: skip


def kernos(project: Path, server: FakeOpenAIServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(project / ".kernos")}
    return _cli.kernos(*args, cwd=project, env=env, timeout=60)


def ok(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 0, run.stderr
    return run.stdout


def sessions(project: Path, server: FakeOpenAIServer) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(ok(kernos(project, server, "sessions", "--json")))[
        "sessions"
    ]
    return listed


def tasks(project: Path, server: FakeOpenAIServer) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(
        ok(kernos(project, server, "tasks", "list", "--json"))
    )["tasks"]
    return listed


def conversation(request: dict[str, Any]) -> list[tuple[str, str]]:
    """A request's messages as ``(role, text)``, system messages left out."""
    return [
        (str(m.get("role")), text_of(m))
        for m in messages(request)
        if m.get("role") not in ("system", "developer")
    ]


def requests_of(server: FakeOpenAIServer, marker: str) -> list[dict[str, Any]]:
    return [r for r in server.requests if marker in system(r)]


# -- main sessions -------------------------------------------------------------------------------


def test_continue_sends_the_model_the_previous_turns_and_keeps_the_session(
    project: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        text("Noted: 7.", when=agent_is("MAIN-AGENT", "Remember the number 7.")),
        text("It was 7.", when=agent_is("MAIN-AGENT", "Which number?")),
    )
    assert ok(kernos(project, server, "run", "Remember the number 7.")) == "Noted: 7.\n"
    (first,) = sessions(project, server)
    again = kernos(project, server, "run", "--continue", "Which number?")
    assert ok(again) == "It was 7.\n"
    assert f"continuing session {first['id']} (2 turns" in again.stderr
    assert conversation(server.requests[-1]) == [
        ("user", "Remember the number 7."),
        ("assistant", "Noted: 7."),
        ("user", "Which number?"),
    ]
    (after,) = sessions(project, server)  # the same session, its new turns appended
    assert (after["id"], after["turns"], after["first_prompt"]) == (
        first["id"],
        4,
        "Remember the number 7.",
    )


def test_session_id_continues_that_session_not_the_latest(
    project: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        text("A noted.", when=agent_is("MAIN-AGENT", "Topic A.")),
        text("B noted.", when=agent_is("MAIN-AGENT", "Topic B.")),
        text("Back to A.", when=agent_is("MAIN-AGENT", "And again?")),
    )
    ok(kernos(project, server, "run", "Topic A."))
    ok(kernos(project, server, "run", "Topic B."))
    latest, older = sessions(project, server)
    assert (latest["first_prompt"], older["first_prompt"]) == ("Topic B.", "Topic A.")
    assert ok(kernos(project, server, "run", "--session", older["id"], "And again?")) == (
        "Back to A.\n"
    )
    assert conversation(server.requests[-1]) == [
        ("user", "Topic A."),
        ("assistant", "A noted."),
        ("user", "And again?"),
    ]
    assert sessions(project, server)[0]["id"] == older["id"]  # now the most recently active


def test_nothing_to_continue_is_one_line_and_exit_2(
    project: Path, server: FakeOpenAIServer
) -> None:
    first = kernos(project, server, "run", "--continue", "hello")
    assert first.returncode == 2 and first.stdout == ""
    assert len(first.stderr.strip().splitlines()) == 1
    assert "no earlier session in this store" in first.stderr
    assert "run without --continue" in first.stderr
    unknown = kernos(project, server, "run", "--session", "s_deadbeef", "hello")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert "no session s_deadbeef" in unknown.stderr and "`kernos sessions`" in unknown.stderr
    both = kernos(project, server, "run", "--continue", "--session", "s_deadbeef", "hello")
    assert both.returncode == 2 and "pass one of them" in both.stderr
    assert server.requests == []  # no model was asked anything


def test_a_session_continues_with_its_own_agent(project: Path, server: FakeOpenAIServer) -> None:
    server.script(
        text("Found it.", when=agent_is("EXPLORE-AGENT", "Find the config.")),
        text("Still kernos.toml.", when=agent_is("EXPLORE-AGENT", "Where again?")),
    )
    ok(kernos(project, server, "run", "--agent", "explore", "Find the config."))
    assert ok(kernos(project, server, "run", "--continue", "Where again?")) == (
        "Still kernos.toml.\n"
    )
    other = kernos(project, server, "run", "--continue", "--agent", "main", "Where?")
    assert other.returncode == 2 and len(other.stderr.strip().splitlines()) == 1
    assert "is a conversation with agent explore; drop --agent main" in other.stderr


def test_sessions_table_and_json(project: Path, server: FakeOpenAIServer) -> None:
    empty = kernos(project, server, "sessions")
    assert ok(empty) == "(no sessions)\n"
    assert json.loads(ok(kernos(project, server, "sessions", "--json"))) == {"sessions": []}
    server.script(
        text("First answer.", when=agent_is("MAIN-AGENT", "First question")),
        text("Follow-up answer.", when=agent_is("MAIN-AGENT", "Follow-up")),
        text("Second answer.", when=agent_is("MAIN-AGENT", "Second question")),
    )
    ok(kernos(project, server, "run", "First question, with a long tail " + "x" * 80))
    ok(kernos(project, server, "run", "--continue", "Follow-up"))
    ok(kernos(project, server, "run", "Second question"))
    lines = ok(kernos(project, server, "sessions")).splitlines()
    assert lines[0].split() == [
        "ID", "AGENT", "MODEL", "TURNS", "TOKENS", "(IN+OUT)", "STARTED", "LAST", "ACTIVE",
        "PROMPT",
    ]  # fmt: skip
    assert len(lines) == 3
    columns = [lines[0].index(name) for name in ("AGENT", "MODEL", "TURNS", "PROMPT")]
    for line in lines[1:]:  # aligned: every row's cells start under their header
        assert all(line[c - 2 : c] == "  " and line[c] != " " for c in columns)
    second, first = lines[1], lines[2]
    assert second.split()[1:4] == ["main", "openai-chat:test", "2"]
    assert second.split()[4].replace(",", "").isdigit()  # tokens in + out, as the server said
    assert second.endswith("  Second question")
    assert "ago" in first or "just now" in first
    assert "First question, with a long tail" in first and "x" * 60 not in first
    listed = sessions(project, server)
    assert [list(s) for s in listed] == [
        ["id", "agent", "model", "turns", "input_tokens", "output_tokens", "started_at",
         "last_active", "first_prompt"],
    ] * 2  # fmt: skip
    assert [s["turns"] for s in listed] == [2, 4]
    assert listed[1]["model"] == "openai-chat:test"
    assert all(isinstance(s["input_tokens"], int) and s["started_at"] > 0 for s in listed)
    one = json.loads(ok(kernos(project, server, "sessions", "--json", "-n", "1")))["sessions"]
    assert [s["id"] for s in one] == [listed[0]["id"]]


# -- children of an earlier run ------------------------------------------------------------------


def test_a_child_of_run_one_is_revived_in_run_two_with_its_old_context(
    project: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("The survey found 3 modules.", when=agent_is("EXPLORE-AGENT", "Survey the repo")),
        text("Survey: 3 modules.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    assert ok(kernos(project, server, "run", "survey it")) == "Survey: 3 modules.\n"
    (task,) = tasks(project, server)
    assert (task["status"], task["residency"], task["run_epoch"]) == ("completed", "evicted", 1)

    server.script(
        tool_call(
            "task_send",
            {"to": "survey", "message": "Which was the largest?"},
            when=agent_is("MAIN-AGENT", "ask the survey"),
        ),
        text("Asked; waiting.", when=agent_is("MAIN-AGENT", "Revived")),
        text("The largest of the 3 is tasks.", when=agent_is("EXPLORE-AGENT", "the largest")),
        text("Largest: tasks.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    run = kernos(project, server, "run", "--continue", "ask the survey which was largest")
    assert ok(run) == "Largest: tasks.\n"
    assert f"Revived {task['id']} (run epoch 2)." in server.tool_results()
    child = requests_of(server, "EXPLORE-AGENT")[-1]
    said = conversation(child)
    assert said[0][0] == "user" and "Survey the repository." in said[0][1]
    assert said[1:] == [
        ("assistant", "The survey found 3 modules."),
        ("user", "Which was the largest?"),
    ]
    (after,) = tasks(project, server)
    assert (after["id"], after["status"], after["run_epoch"]) == (task["id"], "completed", 2)
    assert after["residency"] == "evicted"  # evicted again at the end of run two
    transcript = ok(kernos(project, server, "tasks", "output", task["id"]))
    assert "[residency] to=resident" in transcript
    assert "[assistant] The largest of the 3 is tasks." in transcript


class Gate(FakeOpenAIServer):
    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()


@pytest.fixture
def gated() -> Iterator[Gate]:
    fake = Gate()
    with fake:
        yield fake
        fake.gate.set()


def test_at_exit_settled_children_are_evicted_and_unfinished_ones_disposed(
    project: Path, gated: Gate
) -> None:
    quick = {"prompt": "Quick job.", "category": "quick", "name": "quick"}
    slow = {"prompt": "Slow job.", "subagent_type": "explore", "name": "slow",
            "run_in_background": True}  # fmt: skip
    running = threading.Event()  # the slow child is in its model request, not still queued
    gated.script(
        tool_call("task", quick, when=agent_is("MAIN-AGENT", "two jobs")),
        text("Quick done.", when=agent_is("QUICK-WORKER")),
        tool_call("task", slow, when=agent_is("MAIN-AGENT", "Quick done.")),
        text("Not waiting.", when=agent_is("MAIN-AGENT", "Started task"), hold=running),
        text("never delivered", when=seen(agent_is("EXPLORE-AGENT"), running), hold=gated.gate),
    )
    ok(kernos(project, gated, "run", "two jobs", "--no-wait", "-q"))
    states = {t["name"]: (t["status"], t["residency"]) for t in tasks(project, gated)}
    assert states == {"quick": ("completed", "evicted"), "slow": ("lost", "disposed")}

    gated.script(
        tool_call(
            "task_send",
            {"to": "slow", "message": "Still there?"},
            when=agent_is("MAIN-AGENT", "poke slow"),
        ),
        text("It cannot be continued.", when=agent_is("MAIN-AGENT", "cannot be continued")),
    )
    assert ok(kernos(project, gated, "run", "--continue", "poke slow", "-q")) == (
        "It cannot be continued.\n"
    )
    (refused,) = [r for r in gated.tool_results() if "cannot be continued" in r]
    assert "is lost (disposed) and cannot be continued" in refused
