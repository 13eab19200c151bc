"""A DBOS child's asked call waits durably: its worker is SIGKILLed while it waits, another
worker resumes it still waiting on the same request, a person approves it from another process,
and the tool runs exactly once (the file it appends to has one line)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is
from test_dbos import start
from tests import _wait as wait
from tests.cli.test_run import kernos

from kernos.testing import FakeOpenAIServer, text, tool_call

CONFIG = """
default_model = "openai-chat:test"

[tools.append_line]
function = "steps_probe:append_line"

[agents.main]
instructions = "MAIN-AGENT: you coordinate."
tools = ["append_line"]

[agents.explore]
description = "Read-only research"
instructions = "EXPLORE-AGENT: you research."

[permissions]
ask = ["append_line"]

[tasks]
engine = "dbos"
run_executes = false
on_crash = "resume"
heartbeat = 0.5
"""
PROBE = '''
from pathlib import Path


def append_line(line: str) -> str:
    """Append one line to the project's side-effects file.

    Args:
        line: the text to append.
    """
    with (Path(__file__).parent / "side_effects.txt").open("a", encoding="utf-8") as out:
        out.write(line + "\\n")
    return f"appended {line}"
'''


def _open(project: Path) -> list[dict[str, Any]]:
    listed = kernos("approvals", "--json", cwd=project)
    assert listed.returncode == 0, listed.stderr
    requests: list[dict[str, Any]] = json.loads(listed.stdout)["requests"]
    return requests


def _status(project: Path, task_id: str) -> str | None:
    listed = kernos("tasks", "list", "--json", cwd=project)
    if listed.returncode != 0:
        return None
    rows = json.loads(listed.stdout)
    rows = rows["tasks"] if isinstance(rows, dict) else rows
    return next((str(r["status"]) for r in rows if r["id"] == task_id), None)


@pytest.mark.slow
def test_a_worker_killed_while_its_child_waits_resumes_it_waiting_and_the_tool_runs_once(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[Any],
    fresh_postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KERNOS_STORE_URL", fresh_postgres_url)
    (project / "kernos.toml").write_text(CONFIG, "utf-8")
    (project / "steps_probe.py").write_text(PROBE, "utf-8")
    effects = project / "side_effects.txt"
    spawn = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
             "run_in_background": True, "tools": ["append_line"]}  # fmt: skip
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task"), repeat=True),
        tool_call(
            "append_line",
            {"line": "sent once"},
            when=agent_is("EXPLORE-AGENT", "Survey the repository."),
        ),
        text("Appended it.", when=agent_is("EXPLORE-AGENT", "appended sent once")),
        text("Waiting on the person.", when=agent_is("MAIN-AGENT", "kernos approve"), repeat=True),
        text("Survey: done.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    first = start(project, server, "worker")
    procs.append(first)
    run = start(project, server, "run", "survey it", "-q")
    procs.append(run)
    (request,) = wait.wait_for(lambda: _open(project), "an approval request", alive=[first, run])
    assert _status(project, request["task_id"]) == "waiting"
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    second = start(project, server, "worker")
    procs.append(second)
    # resumed elsewhere, still waiting on the same request (not a second one)
    wait.wait_for(
        lambda: f"{second.pid}" in str(_executor(project, request["task_id"])),
        "the child resumed on the second worker",
        alive=[second, run],
    )
    assert [r["id"] for r in _open(project)] == [request["id"]]
    assert not effects.exists()
    approved = kernos("approve", request["id"], cwd=project)
    assert approved.returncode == 0, approved.stderr
    out, errors = run.communicate(timeout=120)
    assert run.returncode == 0, errors
    assert out == "Survey: done.\n"
    assert effects.read_text("utf-8") == "sent once\n"  # exactly once
    # the parent (in `kernos run`, following the child's row) was told which request it waits on
    told = [r for r in server.requests if agent_is("MAIN-AGENT", request["id"])(r)]
    assert told and "kernos approve" in str(told[0]["messages"][-1])


def _executor(project: Path, task_id: str) -> str | None:
    shown = kernos("tasks", "show", task_id, "--json", cwd=project)
    if shown.returncode != 0:
        return None
    return str(json.loads(shown.stdout).get("task", {}).get("executor"))
