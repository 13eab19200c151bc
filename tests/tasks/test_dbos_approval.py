"""A DBOS child's asked call waits durably: its worker is SIGKILLed while it waits, another
worker resumes it still waiting on the same request, a person approves it from another process,
and the tool runs exactly once (the file it appends to has one line). A waiting grandchild's
parent (a child on another worker) is told which request it waits on, through its inbox."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is
from test_dbos import env, start
from tests import _wait as wait
from tests.cli.test_run import kernos
from tests.conftest import Worker

from kernos.runtime import Store
from kernos.tasks._store import TaskStore
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
    worker: Callable[..., Worker],
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
    first = worker(project, env(project, server))
    run = start(project, server, "run", "survey it", "-q")
    procs.append(run)
    (request,) = wait.wait_for(lambda: _open(project), "an approval request", alive=[first, run])
    assert _status(project, request["task_id"]) == "waiting"
    first.kill()
    second = worker(project, env(project, server))
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


#: the grandchildren run on a model of their own, so a second worker runs them; no process is
#: killed, so the heartbeat is the default (on a loaded machine, a worker does not look dead)
NESTED = CONFIG.replace(
    "[permissions]",
    '[categories.quick]\ndescription = "Small, fast edits"\nmodel = "openai-chat:quick"\n'
    'instructions = "QUICK-WORKER: you edit."\n\n[permissions]',
).replace("heartbeat = 0.5\n", "max_depth = 2\n")


@pytest.mark.slow
def test_a_waiting_grandchild_s_parent_on_another_worker_is_told_the_request(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[Any],
    worker: Callable[..., Worker],
) -> None:
    (project / "kernos.toml").write_text(NESTED, "utf-8")
    (project / "steps_probe.py").write_text(PROBE, "utf-8")
    effects = project / "side_effects.txt"
    spawn = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
             "run_in_background": True, "tools": ["append_line"]}  # fmt: skip
    count = {"prompt": "Count the tests.", "category": "quick", "name": "count",
             "run_in_background": True, "tools": ["append_line"]}  # fmt: skip
    seen, counted = threading.Event(), threading.Event()
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task"), repeat=True),
        tool_call("task", count, when=agent_is("EXPLORE-AGENT", "Survey the repository.")),
        # the child's turn ends once the grandchild waits; it reads its inbox then
        text("Waiting for the count.", when=agent_is("EXPLORE-AGENT", "Started task"), hold=seen),
        tool_call(
            "append_line", {"line": "counted once"}, when=agent_is("QUICK-WORKER", "Count the")
        ),
        text("7 tests.", when=agent_is("QUICK-WORKER", "appended counted once")),
        # told of the request: its turn ends once the grandchild is done, so it reads that too
        text(
            "It waits on a person.", when=agent_is("EXPLORE-AGENT", "kernos approve"), hold=counted
        ),
        text("Survey done: 7 tests.", when=agent_is("EXPLORE-AGENT", "task completion")),
        text("All done.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    try:
        children = worker(project, env(project, server), "--models", "openai-chat:test")
        grandchildren = worker(project, env(project, server), "--models", "openai-chat:quick")
        procs.append(run := start(project, server, "run", "survey it", "-q"))
        alive = [children, grandchildren, run]
        (request,) = wait.wait_for(lambda: _open(project), "an approval request", alive=alive)
        assert _status(project, request["task_id"]) == "waiting"
        seen.set()

        def told() -> list[dict[str, Any]]:
            return [r for r in server.requests if agent_is("EXPLORE-AGENT", request["id"])(r)]

        (notice, *_) = wait.wait_for(told, "the child told of the request", alive=alive)
        said = str(notice["messages"][-1]["content"])
        assert f"task waiting name:count id:{request['task_id']} status:waiting" in said
        assert f"kernos approve {request['id']}" in said
        approved = kernos("approve", request["id"], cwd=project)
        assert approved.returncode == 0, approved.stderr
        wait.wait_for(
            lambda: _status(project, request["task_id"]) == "completed",
            "the grandchild to finish",
            alive=alive,
        )
        counted.set()
        out, errors = run.communicate(timeout=120)
    finally:
        seen.set()
        counted.set()
    assert run.returncode == 0, errors
    assert out == "All done.\n"
    assert effects.read_text("utf-8") == "counted once\n"
    assert len(told()) == 1  # told once
    # the notice went to the child that spawned it, not to the top parent
    assert not [r for r in server.requests if agent_is("MAIN-AGENT", request["id"])(r)]


def test_a_waiting_notice_goes_into_the_parent_s_inbox_once_per_request(store_target: str) -> None:
    store = Store(store_target)
    tasks = TaskStore(store)
    try:
        rows = [("t_c", "s_main", "s_c", 1), ("t_g", "s_c", "s_g", 2)]
        for task_id, parent, child, depth in rows:
            tasks.insert({
                "id": task_id, "parent_session": parent, "child_session": child, "depth": depth,
                "target_kind": "agent", "target": "explore", "model": "m", "status": "running",
                "residency": "resident", "created_at": time.time(), "engine": "dbos",
            })  # fmt: skip
        # told by its run, then by a replay or a resumed run of it: one message
        told = [tasks.tell_session("s_c", f"waits {n}", "approval:a_1") for n in range(2)]
        assert told == [True, False]
        assert tasks.tell_session("s_c", "waits again", "approval:a_2")
        assert tasks.take_messages("t_c", 1, 1) == (["waits 0", "waits again"], False)
        assert not tasks.tell_session("s_main", "to the top", "approval:a_3")  # no task's session
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("where", ["in-the-run", "on-a-worker"])
def test_interrupting_a_waiting_dbos_child_denies_its_request_as_interrupted(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[Any],
    where: str,
    worker: Callable[..., Worker],
) -> None:
    config = CONFIG.replace("heartbeat = 0.5\n", "")
    if where == "in-the-run":
        config = config.replace("run_executes = false\n", "")
    (project / "kernos.toml").write_text(config, "utf-8")
    (project / "steps_probe.py").write_text(PROBE, "utf-8")
    spawn = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
             "run_in_background": True, "tools": ["append_line"]}  # fmt: skip
    stop = {"to": "survey", "deliver_as": "interrupt"}
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        tool_call("append_line", {"line": "never"}, when=agent_is("EXPLORE-AGENT", "Survey the")),
        tool_call("task_send", stop, when=agent_is("MAIN-AGENT", "kernos approve")),
        text("Told it to stop.", when=agent_is("MAIN-AGENT", "Interrupting")),
        text("It stopped.", when=agent_is("MAIN-AGENT", "interrupted")),
    )
    if where == "on-a-worker":
        worker(project, env(project, server))
    procs.append(run := start(project, server, "run", "survey it", "-q"))
    out, errors = run.communicate(timeout=120)
    assert run.returncode == 0, errors
    assert out in ("Told it to stop.\n", "It stopped.\n")
    assert not (project / "side_effects.txt").exists()
    listed = kernos("approvals", "--all", "--json", cwd=project)
    (request,) = json.loads(listed.stdout)["requests"]
    assert (request["state"], request["answered_how"], request["reason"]) == (
        "denied", "interrupt", "interrupted",
    )  # fmt: skip
    task_id = request["task_id"]
    wait.wait_for(lambda: _status(project, task_id) == "interrupted", "the child interrupted")
    assert any(r.startswith(f"Interrupting {task_id}") for r in server.tool_results())
    # the call's result says why it did not run; the child stops after that step
    transcript = kernos("tasks", "output", task_id, cwd=project)
    assert (
        f"append_line was not run: the task was interrupted while approval request "
        f"{request['id']} waited for a person"
    ) in transcript.stdout, transcript.stdout
    assert sum(1 for r in server.requests if agent_is("EXPLORE-AGENT")(r)) == 1
    assert server.unmatched == []
