"""The DBOS task engine on SQLite: real DBOS, real ``kernos run`` and ``kernos worker``
processes, the model a local OpenAI-compatible server."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is, last, text_of, user_texts
from tests._wait import wait_for
from tests.conftest import Worker

from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager
from kernos.testing import FakeOpenAIServer, text, tool_call

KERNOS = str(Path(sys.executable).with_name("kernos"))
SPAWN = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
         "run_in_background": True}  # fmt: skip


def use_dbos(project: Path, **tasks: Any) -> None:
    """The project's ``[tasks]`` section (the last of the test config) on the DBOS engine."""
    lines = ['engine = "dbos"', *(f"{k} = {v}" for k, v in tasks.items())]
    with (project / "kernos.toml").open("a", encoding="utf-8") as config:
        config.write("\n".join(lines) + "\n")


def env(project: Path, server: FakeOpenAIServer) -> dict[str, str]:
    environ = {**os.environ, **server.env(), "KERNOS_HOME": str(project / ".kernos")}
    environ.pop("KERNOS_TASK_ENGINE", None)
    return environ


def start(project: Path, server: FakeOpenAIServer, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [KERNOS, *args], cwd=project, env=env(project, server),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def row(project: Path, status: str | None = None) -> dict[str, Any] | None:
    try:
        with sqlite3.connect(project / ".kernos" / "kernos.db") as db:
            db.row_factory = sqlite3.Row
            where, params = ("WHERE status = ?", (status,)) if status else ("", ())
            found = db.execute(f"SELECT * FROM tasks {where}", params).fetchall()
    except sqlite3.OperationalError:
        return None
    return dict(found[0]) if found else None


def wait_row(project: Path, status: str, timeout: float = 90.0) -> dict[str, Any]:
    return wait_for(lambda: row(project, status), f"a task {status}", timeout)


async def test_a_resubmitted_spawn_runs_once(project: Path, server: FakeOpenAIServer) -> None:
    """The workflow id is the task id: submitting the same child again returns the recorded
    outcome and the model is not asked again."""
    from dbos import DBOS, SetWorkflowID

    from kernos.tasks._dbos import child_workflow, queue_name

    use_dbos(project)
    server.script(text("the survey", when=agent_is("EXPLORE-AGENT")))
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        assert manager.engine.name == "dbos"
        session = runtime.session("main", record_turns=False)
        session.add_tools(manager.tools_for(session))
        resolution = manager.resolve({"prompt": "Survey.", "subagent_type": "explore"}, session)
        (record,) = manager.spawn(session, resolution, background=True)
        await manager.wait([record])
        assert record.status == "completed" and record.final_text == "the survey"
        asked = len(server.requests)
        await manager.engine._recorded([record.id])  # type: ignore[attr-defined]
        with SetWorkflowID(record.id):
            again = await DBOS.enqueue_workflow_async(
                queue_name(record.model_name), child_workflow, record.id, "Survey.", 1
            )
        assert again.workflow_id == record.id
        assert await again.get_result() == "completed"
        assert len(server.requests) == asked  # not run again
    finally:
        await manager.aclose(wait=True)
        runtime.close()


@pytest.mark.slow
def test_a_worker_runs_a_run_s_child_and_the_parent_gets_one_notice(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[subprocess.Popen[str]],
    worker: Callable[..., Worker],
) -> None:
    use_dbos(project, run_executes="false")
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("The survey found 3 modules.", when=agent_is("EXPLORE-AGENT")),
        text("Survey: 3 modules.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    executing = worker(project, env(project, server))
    run = start(project, server, "run", "survey it", "-q")
    procs.append(run)
    out, errors = run.communicate(timeout=120)
    assert run.returncode == 0, errors
    assert out == "Survey: 3 modules.\n"
    task = row(project, "completed")
    assert task is not None
    # the run did not execute it: the worker did, and the store says so
    assert task["executor"] == f"{socket.gethostname()}:{executing.pid}"
    notices = [t for t in user_texts(server, "MAIN-AGENT") if "task completion" in t]
    assert len(notices) == 1 and notices[0].count(f"id:{task['id']} ") == 1
    shown = subprocess.run(
        [KERNOS, "tasks", "show", task["id"]], cwd=project, env=env(project, server),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert f"executor: {socket.gethostname()}:{executing.pid} (dbos engine)" in shown.stdout


def kill_9_mid_child_resumes_elsewhere(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[subprocess.Popen[str]],
    start_worker: Callable[[], Worker],
    read_row: Callable[[str], dict[str, Any] | None],
) -> tuple[Worker, Worker]:
    """A worker (``start_worker()``, on the ``worker`` fixture) is SIGKILLed while its child's
    second model request is in flight; a second worker resumes the child: its completed first
    step is not sent again, only the in-flight one, and it ends ``completed``
    (``read_row(status)`` reads the store). Returns the killed worker and the one that resumed."""
    use_dbos(project, run_executes="false", on_crash='"resume"', heartbeat="0.5")
    gate = threading.Event()

    def second_request(request: dict[str, Any]) -> bool:
        return agent_is("EXPLORE-AGENT")(request) and last(request).get("role") == "tool"

    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        # step 1: the child calls a tool it does not have (the retry is step 2)
        tool_call("no_such_tool", {}, when=agent_is("EXPLORE-AGENT", "Survey the repository.")),
        text("The survey found 3 modules.", when=second_request, hold=gate, repeat=True),
        text("Survey: 3 modules.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    first = start_worker()
    run = start(project, server, "run", "survey it", "-q")
    procs.append(run)
    # step 2 in flight on `first`
    wait_for(lambda: any(second_request(r) for r in server.requests), "the second request")
    first.kill()
    second = start_worker()
    gate.set()
    out, errors = run.communicate(timeout=120)
    assert run.returncode == 0, errors
    assert out == "Survey: 3 modules.\n"
    task = read_row("completed")
    assert task is not None and task["executor"] == f"{socket.gethostname()}:{second.pid}"
    firsts = [
        r for r in server.requests
        if agent_is("EXPLORE-AGENT")(r) and "Survey the repository." in text_of(last(r))
    ]  # fmt: skip
    assert len(firsts) == 1  # the completed step was replayed from its record, not re-sent
    assert sum(1 for r in server.requests if second_request(r)) == 2  # the in-flight one again
    return first, second


@pytest.mark.slow
def test_kill_9_of_a_worker_mid_child_resumes_on_another_without_repeating_steps(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[subprocess.Popen[str]],
    worker: Callable[..., Worker],
) -> None:
    kill_9_mid_child_resumes_elsewhere(
        project, server, procs, lambda: worker(project, env(project, server)),
        lambda status: row(project, status),
    )  # fmt: skip


def test_a_durable_child_model_makes_each_answer_of_any_model_a_step() -> None:
    """The DBOS engine's model wrapper wraps the loop's view of any model (:class:`DurableLean`):
    the pooled wire for an OpenAI-compatible model, pydantic-ai's model interface for others."""
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from kernos.runtime import Session
    from kernos.runtime._models._model_adapter import PydanticModelLean
    from kernos.runtime._session._lean import ChatLean
    from kernos.tasks._dbos import DurableLean, DurableModel

    plain = OpenAIChatModel(
        "m", provider=OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="k")
    )
    other = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("hi")]))
    for model, view in ((plain, ChatLean), (other, PydanticModelLean)):
        durable = Session(DurableModel(model))._lean.model
        assert isinstance(durable, DurableLean) and isinstance(durable.inner, view)


def test_a_lean_step_record_reads_like_a_pydantic_ai_one() -> None:
    """A lean answer is recorded as DurableModel.request records a response, and read back
    whole: a run resumed on either model engine replays the other's records."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.usage import RequestUsage

    from kernos.runtime._models._lean_wire import Reply
    from kernos.tasks._dbos import _record_reply, _reply_record

    for args in ('{"path": "a.txt"}', "not json{", ""):  # as the model sent them
        reply = Reply(
            text="looking", calls=[("c1", "read_file", args)], input_tokens=7, output_tokens=3,
            cached_tokens=2, model_name="m", finish_reason="tool_calls",
        )  # fmt: skip
        assert _record_reply(_reply_record(reply)) == reply
    recorded = ModelResponse(
        parts=[TextPart("done"), ToolCallPart("t", {"n": 1}, "c2")],
        usage=RequestUsage(input_tokens=5, output_tokens=1),
        model_name="m",
    )  # what the pydantic-ai engine's step records
    raw = ModelMessagesTypeAdapter.dump_json([recorded]).decode()
    assert _record_reply(raw) == Reply(
        text="done", calls=[("c2", "t", '{"n":1}')], input_tokens=5, output_tokens=1,
        model_name="m", provider_name=None,  # the record names no provider
    )  # fmt: skip


async def test_a_child_whose_cancel_was_asked_while_queued_ends_cancelled_where_taken(
    project: Path, server: FakeOpenAIServer
) -> None:
    """An executor handed a queued child whose cancel was asked (its spawner may be gone) takes
    it and ends it cancelled, with no model request: the request is read from the row taken."""
    from kernos.tasks._dbos import DBOSEngine

    use_dbos(project)
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        engine = manager.engine
        assert isinstance(engine, DBOSEngine)
        await engine.ready()
        manager.store.insert(
            {
                "id": "t_queued01", "parent_session": "s_gone", "target_kind": "agent",
                "target": "explore", "model": "openai-chat:test", "status": "pending",
                "residency": "resident", "created_at": time.time(), "engine": "dbos",
            }
        )  # fmt: skip
        manager.store.request_cancel("t_queued01")
        assert await engine.run_remote("t_queued01", "Survey.", 1, []) == "cancelled"
        stored = manager.store.get("t_queued01")
        assert stored is not None and stored["status"] == "cancelled"
        assert stored["executor"] == engine.executor
        assert server.requests == []
    finally:
        await manager.aclose(wait=True)
        runtime.close()


@pytest.mark.slow
def test_a_child_whose_executors_keep_dying_ends_lost_instead_of_being_resumed_again(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[subprocess.Popen[str]],
    worker: Callable[..., Worker],
) -> None:
    """A run already resumed MAX_RESUMES times after its executor died is not resumed once more
    (a child that takes down every process it runs on would make its way through the fleet): it
    ends ``lost``, saying why, and its parent hears so once."""
    from kernos.tasks._dbos import MAX_RESUMES

    use_dbos(project, run_executes="false", on_crash='"resume"', heartbeat="0.5")
    gate = threading.Event()
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("never", when=agent_is("EXPLORE-AGENT", "Survey the repository."), hold=gate),
        text("It was lost.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    first = worker(project, env(project, server))
    run = start(project, server, "run", "survey it", "-q")
    procs.append(run)
    reached = lambda: any(agent_is("EXPLORE-AGENT")(r) for r in server.requests)  # noqa: E731
    wait_for(reached, "the child to reach the model")
    running = row(project, "running")
    assert running is not None
    with sqlite3.connect(project / ".kernos" / "kernos.db") as db:  # as if resumed before
        for n in range(MAX_RESUMES):
            db.execute(
                "INSERT INTO task_events (task_id, seq, type, payload, created_at) "
                "VALUES (?, ?, 'resumed', ?, 0)",
                (running["id"], 1000 + n, f'{{"epoch": 1, "time": {n + 1}, "after": "h:1"}}'),
            )
    first.kill()
    worker(project, env(project, server))  # the second
    out, errors = run.communicate(timeout=120)
    gate.set()
    assert run.returncode == 0, errors
    assert out == "It was lost.\n"
    lost = row(project, "lost")
    assert lost is not None and lost["id"] == running["id"]
    assert f"stopped answering {MAX_RESUMES + 1} times" in lost["error"]
    assert "Start it anew with the task tool" in lost["error"]
    asked = [r for r in server.requests if agent_is("EXPLORE-AGENT")(r)]
    assert len(asked) == 1  # not run again on the second worker
    notices = [r for r in server.requests if agent_is("MAIN-AGENT", "task completion")(r)]
    assert len(notices) == 1
