"""Budgets through ``kernos run`` against the local server: a child that never stops
calling tools stops at ``max_turns`` / ``max_tokens``, a child whose model never answers stops at
its ``timeout``, both with status ``error`` and a code, and the parent is told the limit and its
value; ``kernos run --timeout`` caps the whole run."""

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
from tasks_helpers import agent_is, messages, text_of
from tests import _cli

from kernos.testing import FakeOpenAIServer, text, tool_call

KERNOS = str(Path(sys.executable).with_name("kernos"))

CONFIG = """
default_model = "openai-chat:test"

[agents.main]
instructions = "MAIN-AGENT: you coordinate."

[agents.explore]
description = "Read-only research"
instructions = "EXPLORE-AGENT: you research."
tools = ["list_files"]
{explore}

[tasks]
{tasks}
"""

LOOP = {"prompt": "TASK: look around forever.", "subagent_type": "explore", "name": "looper"}


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Held answers wait for this; set at the end so the server's threads finish."""
    event = threading.Event()
    yield event
    event.set()


def project(tmp_path: Path, explore: str = "", tasks: str = "") -> Path:
    (tmp_path / "kernos.toml").write_text(CONFIG.format(explore=explore, tasks=tasks))
    return tmp_path


def kernos(where: Path, server: FakeOpenAIServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(where / ".kernos")}
    return _cli.kernos(*args, cwd=where, env=env, timeout=90)


def only_task(where: Path, server: FakeOpenAIServer) -> dict[str, Any]:
    listed = kernos(where, server, "tasks", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    tasks: list[dict[str, Any]] = json.loads(listed.stdout)["tasks"]
    assert len(tasks) == 1, tasks
    return tasks[0]


def status_event(where: Path, server: FakeOpenAIServer, task_id: str) -> dict[str, Any]:
    shown = kernos(where, server, "tasks", "show", task_id, "--json")
    assert shown.returncode == 0, shown.stderr
    history = json.loads(shown.stdout)["history"]
    payload: dict[str, Any] = [e for e in history if e["type"] == "status"][-1]["payload"]
    return payload


def child_requests(server: FakeOpenAIServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if agent_is("EXPLORE-AGENT")(r)]


def seen_by_main(server: FakeOpenAIServer) -> str:
    """Every tool result and user message the main agent received, joined."""
    return "\n".join(
        text_of(m)
        for r in server.requests
        if agent_is("MAIN-AGENT")(r)
        for m in messages(r)
        if m.get("role") in ("tool", "user")
    )


def script_endless_child(server: FakeOpenAIServer, spawn: dict[str, Any]) -> None:
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "coordinate a loop")),
        tool_call("list_files", {}, when=agent_is("EXPLORE-AGENT"), repeat=True),
        text("the child was stopped", when=agent_is("MAIN-AGENT", "budget_exceeded")),
    )


def test_max_turns_stops_a_child_that_never_stops_calling_tools(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    where = project(tmp_path, explore="max_turns = 3")
    script_endless_child(server, LOOP)
    done = kernos(where, server, "run", "coordinate a loop")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the child was stopped\n"
    assert len(child_requests(server)) == 3  # the 4th request is never sent
    task = only_task(where, server)
    assert task["status"] == "error"
    assert task["error"].startswith("budget_exceeded: ")
    assert "max_turns limit of 3 (3 model requests made)" in seen_by_main(server)
    event = status_event(where, server, task["id"])
    assert (event["to"], event["code"]) == ("error", "budget_exceeded")


def test_max_tokens_from_the_tasks_defaults(server: FakeOpenAIServer, tmp_path: Path) -> None:
    where = project(tmp_path, tasks="max_tokens = 1")
    script_endless_child(server, LOOP)
    done = kernos(where, server, "run", "coordinate a loop")
    assert done.returncode == 0, done.stderr
    assert len(child_requests(server)) == 1  # the first answer used more than one token
    assert "max_tokens limit of 1 (" in seen_by_main(server)
    assert only_task(where, server)["status"] == "error"


def test_an_agents_own_zero_lifts_the_default(server: FakeOpenAIServer, tmp_path: Path) -> None:
    where = project(tmp_path, explore="max_turns = 0", tasks="max_turns = 1\nmax_tokens = 0")
    server.script(
        tool_call("task", LOOP, when=agent_is("MAIN-AGENT", "coordinate a loop")),
        tool_call("list_files", {}, when=agent_is("EXPLORE-AGENT")),
        tool_call("list_files", {}, when=agent_is("EXPLORE-AGENT")),
        text("looked twice", when=agent_is("EXPLORE-AGENT")),
        text("fine", when=agent_is("MAIN-AGENT", "looked twice")),
    )
    done = kernos(where, server, "run", "coordinate a loop")
    assert (done.returncode, done.stdout) == (0, "fine\n"), done.stderr
    assert only_task(where, server)["status"] == "completed"


def test_background_notice_names_the_limit_and_its_value(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    where = project(tmp_path, explore="max_turns = 2")
    server.script(
        tool_call(
            "task",
            {**LOOP, "run_in_background": True},
            when=agent_is("MAIN-AGENT", "coordinate a loop"),
        ),
        text("waiting for the child", when=agent_is("MAIN-AGENT", "Started task")),
        tool_call("list_files", {}, when=agent_is("EXPLORE-AGENT"), repeat=True),
        text("noted", when=agent_is("MAIN-AGENT", "task completion")),
    )
    done = kernos(where, server, "run", "coordinate a loop")
    assert (done.returncode, done.stdout) == (0, "noted\n"), done.stderr
    notice = next(
        text_of(m)
        for r in server.requests
        for m in messages(r)
        if m.get("role") == "user" and text_of(m).startswith("task completion")
    )
    assert "status:error" in notice
    assert "budget_exceeded: the child was stopped at its max_turns limit of 2" in notice


def test_timeout_stops_a_child_whose_model_never_answers(
    server: FakeOpenAIServer, tmp_path: Path, gate: threading.Event
) -> None:
    where = project(tmp_path, explore='timeout = "1s"')
    server.script(
        tool_call("task", LOOP, when=agent_is("MAIN-AGENT", "coordinate a loop")),
        text("too late", when=agent_is("EXPLORE-AGENT"), hold=gate),  # held open
        text("the child timed out", when=agent_is("MAIN-AGENT", "timeout: ")),
    )
    done = kernos(where, server, "run", "coordinate a loop")
    assert (done.returncode, done.stdout) == (0, "the child timed out\n"), done.stderr
    assert "timeout: the child was stopped at its timeout limit of 1s (ran " in seen_by_main(server)
    task = only_task(where, server)
    assert task["status"] == "error" and task["error"].startswith("timeout: ")
    assert status_event(where, server, task["id"])["code"] == "timeout"


def test_run_timeout_caps_the_run_and_cancels_children(
    server: FakeOpenAIServer, tmp_path: Path, gate: threading.Event
) -> None:
    where = project(tmp_path)
    server.script(
        tool_call(
            "task",
            {**LOOP, "run_in_background": True},
            when=agent_is("MAIN-AGENT", "coordinate a loop"),
        ),
        text("waiting for the child", when=agent_is("MAIN-AGENT", "Started task")),
        text("too late", when=agent_is("EXPLORE-AGENT"), hold=gate),
    )
    done = kernos(where, server, "run", "coordinate a loop", "--timeout", "6s")
    assert done.returncode == 124, done.stderr
    assert done.stdout == ""
    assert "the run reached its --timeout of 6s and was stopped" in done.stderr
    assert only_task(where, server)["status"] == "cancelled"


def test_run_timeout_when_the_main_model_never_answers(
    server: FakeOpenAIServer, tmp_path: Path, gate: threading.Event
) -> None:
    where = project(tmp_path)
    server.script(text("too late", hold=gate))
    done = kernos(where, server, "run", "hello", "--timeout", "1s")
    assert done.returncode == 124, done.stderr
    assert "--timeout of 1s" in done.stderr


@pytest.mark.parametrize(
    ("setting", "key", "fix"),
    [
        ('timeout = "soon"', "tasks.timeout", 'write a duration such as "30s"'),
        ('timeout = "-5m"', "tasks.timeout", 'write a duration such as "30s"'),
        ("timeout = -5", "tasks.timeout", "is negative"),
        ("max_turns = -1", "tasks.max_turns", "write a whole number of 1 or more (0: no limit)"),
        ('max_tokens = "lots"', "tasks.max_tokens", "write a whole number"),
    ],
)
def test_bad_budget_values_are_config_errors_with_the_fix(
    server: FakeOpenAIServer, tmp_path: Path, setting: str, key: str, fix: str
) -> None:
    where = project(tmp_path, tasks=setting)
    done = kernos(where, server, "run", "hello")
    assert done.returncode == 2
    assert f"kernos.toml: {key}: " in done.stderr
    assert fix in done.stderr
    assert server.requests == []


def test_bad_run_timeout_is_exit_2(server: FakeOpenAIServer, tmp_path: Path) -> None:
    done = kernos(project(tmp_path), server, "run", "hello", "--timeout", "soon")
    assert done.returncode == 2
    assert "--timeout: 'soon' is not a duration; write a duration such as" in done.stderr


def test_the_main_agents_own_max_turns_fails_the_run(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        'default_model = "openai-chat:test"\n[agents.main]\nmax_turns = 2\n'
    )
    server.script(tool_call("list_files", {}, repeat=True))
    done = kernos(tmp_path, server, "run", "look forever")
    assert done.returncode == 1, done.stderr
    assert "budget_exceeded: max_turns = 2 reached (2 model requests made)" in done.stderr
    assert len(server.requests) == 2
