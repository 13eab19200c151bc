"""The DBOS engine uses only DBOS's public API: no private module or name, queues in
the system database before DBOS launches (a first run's children do not wait for the queue
manager's scan), and a dead executor's children resumed onto their own model's queue."""

from __future__ import annotations

import ast
import asyncio
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is
from test_dbos import env, use_dbos, wait_row
from tests import _wait as wait
from tests.conftest import Worker

from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager
from kernos.testing import FakeOpenAIServer, text

ENGINE = Path(__file__).parents[2] / "src" / "kernos" / "tasks" / "_dbos"
#: every module of the engine, one text
SOURCE = "\n".join(p.read_text("utf-8") for p in sorted(ENGINE.rglob("*.py")))
MODEL = "openai-chat:test"


def private_uses(source: str) -> list[str]:
    """Every private DBOS module imported, name imported from ``dbos`` that is not in its
    ``__all__``, and ``_attribute`` read from ``DBOS``, ``DBOSClient`` or a name ``dbos``."""
    import dbos

    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dbos":
            if node.module != "dbos":
                found.append(f"from {node.module} import ...")
            else:
                found += [f"dbos.{a.name}" for a in node.names if a.name not in dbos.__all__]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("dbos.")]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and isinstance(node.value, ast.Name)
            and node.value.id in {"DBOS", "DBOSClient", "dbos"}
        ):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_the_engine_uses_only_dbos_s_public_api() -> None:
    """A DBOS upgrade may change its private names silently; the engine uses none."""
    assert private_uses(SOURCE) == []


def test_the_check_finds_each_kind_of_private_use() -> None:
    source = (
        "from dbos._serialization import DBOSPortableJSON\n"
        "from dbos import DBOS, DefaultSerializer\n"
        "import dbos._queue\n"
        "DBOS._recover_pending_workflows(['x'])\n"
        "dbos._listening_queues\n"
        "DBOS.launch()\n"
    )
    assert sorted(private_uses(source)) == [
        "DBOS._recover_pending_workflows",
        "dbos.DefaultSerializer",
        "dbos._listening_queues",
        "dbos._queue",
        "from dbos._serialization import ...",
    ]


def test_the_portable_json_serializer_is_the_configured_one() -> None:
    """Values stored as portable JSON, never pickle (an upgrade cannot break recovery)."""
    from dbos import DBOSPortableJSONSerializer

    assert DBOSPortableJSONSerializer().name() == "portable_json"
    assert "DBOSPortableJSONSerializer()" in SOURCE


async def test_a_first_run_s_queues_are_in_the_database_when_dbos_launches(
    project: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DBOS's queue manager polls the queues it finds at launch from the start and looks for
    new ones only once a second: the queues of the config's models and of ``--model`` are
    registered before the launch, on a database that did not exist yet."""
    from dbos import DBOS, DBOSClient

    from kernos.tasks._dbos import queue_name

    use_dbos(project)
    home = project / ".kernos"
    assert not (home / "dbos.sqlite").exists()
    at_launch: list[set[str]] = []
    launch = DBOS.launch

    def queues() -> set[str]:
        client = DBOSClient(system_database_url=f"sqlite:///{home}/dbos.sqlite")
        try:
            return {q.name for q in client.list_queues()}
        except Exception:  # no tables yet: no queue either
            return set()
        finally:
            client.destroy()

    def watched_launch() -> None:  # the real launch, once the database was looked at
        at_launch.append(queues())
        launch()

    monkeypatch.setattr(DBOS, "launch", watched_launch)
    runtime = Runtime(load_config(cwd=project), model="openai-chat:chosen")  # --model
    manager = TaskManager(runtime)
    try:
        await manager.engine.ready()  # type: ignore[attr-defined]
    finally:
        await manager.aclose(wait=False)
        runtime.close()
    assert at_launch == [{queue_name(MODEL), queue_name("openai-chat:chosen")}]


async def test_a_process_that_executes_nothing_registers_its_queues_once_launched(
    project: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``kernos run`` with ``run_executes = false`` polls none of the queues: it does not
    open a client of its own to put them in the database before the launch (a connection
    pool opened and closed, ~0.1 s before DBOS is ready, on PostgreSQL); they are there, with
    the model's limit, once the engine is ready, before its first child is queued."""
    from dbos import DBOS, DBOSClient

    from kernos.tasks._dbos import queue_name

    use_dbos(project, run_executes="false")
    home = project / ".kernos"
    at_launch: list[dict[str, int | None]] = []
    launch = DBOS.launch

    def queues() -> dict[str, int | None]:
        client = DBOSClient(system_database_url=f"sqlite:///{home}/dbos.sqlite")
        try:
            return {q.name: q.global_concurrency for q in client.list_queues()}
        except Exception:  # no tables yet: no queue either
            return {}
        finally:
            client.destroy()

    def watched_launch() -> None:
        at_launch.append(queues())
        launch()

    monkeypatch.setattr(DBOS, "launch", watched_launch)
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        await manager.engine.ready()  # type: ignore[attr-defined]
        ready = queues()
    finally:
        await manager.aclose(wait=False)
        runtime.close()
    assert at_launch == [{}]
    assert ready == {queue_name(MODEL): 5}  # [tasks] concurrency of the test config


@pytest.mark.slow
async def test_a_dead_executor_s_child_is_resumed_on_its_model_s_queue_by_any_of_its_workers(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[subprocess.Popen[str]],
    worker: Callable[..., Worker],
) -> None:
    """The reaper puts the child back on its model's queue: on DBOS's internal queue, which
    every process polls, a process that executes nothing could take it (and end it unrun), and
    it would escape the model's global limit. Any worker of that model may then take it, not
    only the reaper (which here executes nothing)."""
    from dbos import DBOS

    from kernos.tasks._dbos import queue_name

    use_dbos(project, run_executes="false", on_crash='"resume"')  # this process executes nothing
    held = threading.Event()
    server.script(
        text("The survey found 3 modules.", when=agent_is("EXPLORE-AGENT"), hold=held, repeat=True)
    )
    first = worker(project, env(project, server))
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        session = runtime.session("main", record_turns=False)
        session.add_tools(manager.tools_for(session))
        resolution = manager.resolve({"prompt": "Survey.", "subagent_type": "explore"}, session)
        (record,) = manager.spawn(session, resolution, background=True)
        started = lambda: any(agent_is("EXPLORE-AGENT")(r) for r in server.requests)  # noqa: E731
        await wait.until(started, "the worker to start the child")
        first.kill()

        await manager.engine._reap(f"{socket.gethostname()}:{first.pid}")  # type: ignore[attr-defined]
        status = await DBOS.get_workflow_status_async(record.id)
        assert status is not None
        assert (status.status, status.queue_name) == ("ENQUEUED", queue_name(MODEL))
        second = worker(project, env(project, server), "--models", MODEL)
        held.set()
        done: dict[str, Any] = await asyncio.to_thread(wait_row, project, "completed")
        assert done["id"] == record.id
        assert done["executor"] == f"{socket.gethostname()}:{second.pid}"
    finally:
        held.set()
        await manager.aclose(wait=False)
        runtime.close()
