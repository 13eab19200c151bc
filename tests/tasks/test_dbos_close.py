"""The launch and end of a run on the DBOS engine (its fixed costs): closing waits for
the children's workflows to record their outcomes with one read of DBOS for all of them, then
deletes their records; an engine whose queues DBOS refuses does not leave DBOS launched."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is
from test_dbos import env, use_dbos
from tests.conftest import Worker

from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager
from kernos.testing import FakeOpenAIServer, text

CHILDREN = 4


async def test_closing_reads_the_finished_workflows_at_once_then_deletes_them(
    project: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that executed 200 children read their statuses one by one as it closed: 0.7 s of
    its end on PostgreSQL. One read (two when the last body is still recording) does."""
    from dbos import DBOS, DBOSClient

    use_dbos(project)
    server.script(text("the survey", when=agent_is("EXPLORE-AGENT"), repeat=True))
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    closing = False
    reads: list[str] = []
    one, many = DBOS.get_workflow_status_async, DBOS.list_workflows_async

    async def read_one(workflow_id: str) -> Any:
        if closing:
            reads.append(workflow_id)
        return await one(workflow_id)

    async def read_many(**kwargs: Any) -> Any:
        if closing:
            reads.append(",".join(kwargs.get("workflow_ids") or []))
        return await many(**kwargs)

    monkeypatch.setattr(DBOS, "get_workflow_status_async", read_one)
    monkeypatch.setattr(DBOS, "list_workflows_async", read_many)
    try:
        session = runtime.session("main", record_turns=False)
        session.add_tools(manager.tools_for(session))
        calls = [{"prompt": f"Survey part {n}.", "subagent_type": "explore"}
                 for n in range(CHILDREN)]  # fmt: skip
        records = [
            record
            for call in calls
            for record in manager.spawn(session, manager.resolve(call, session), background=True)
        ]
        assert await manager.wait(records, timeout=60)
        assert [r.status for r in records] == ["completed"] * CHILDREN
        closing = True
    finally:
        await manager.aclose(wait=True)
        runtime.close()
    assert 1 <= len(reads) < CHILDREN, reads
    client = DBOSClient(system_database_url=f"sqlite:///{project / '.kernos'}/dbos.sqlite")
    try:
        left = client.list_workflows(workflow_ids=[r.id for r in records], load_input=False)
    finally:
        client.destroy()
    assert left == []  # deleted once recorded


async def test_an_engine_whose_queue_is_refused_does_not_leave_dbos_launched(
    project: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that executes nothing registers its queues once DBOS launched: when the
    database refuses one, the engine does not start (the first spawn says why) and DBOS is
    destroyed again, not left running with its threads and pool for a user that is gone."""
    from dbos import DBOS

    from kernos.tasks import _dbos

    use_dbos(project, run_executes="false")

    def refused(name: str, **options: Any) -> Any:
        raise RuntimeError(f"the database refused queue {name}")

    monkeypatch.setattr(DBOS, "register_queue", refused)
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        with pytest.raises(RuntimeError, match="refused queue"):
            await manager.engine.ready()  # type: ignore[attr-defined]
    finally:
        await manager.aclose(wait=False)
        runtime.close()
        left = _dbos._Launch.url
        while _dbos._Launch.url is not None:  # broken: not for the next test to inherit
            _dbos._Launch.release()
    assert left is None


@pytest.mark.postgres
@pytest.mark.slow  # a real `kernos worker` on PostgreSQL
async def test_a_follower_on_postgres_reads_a_status_change_when_it_commits(
    project: Path,
    server: FakeOpenAIServer,
    fresh_postgres_url: str,
    procs: list[subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
    worker: Callable[..., Worker],
) -> None:
    """The run learns that a worker took its child, and that the child ended, from the store's
    notification when the worker's update commits, not at its next poll: with the poll made
    an hour long, the child is still followed to its end and its notice delivered once. (The
    last child's end reached the run up to a poll, 0.25 s, late: part of every run's end.)"""
    from kernos.tasks import _dbos
    from kernos.tasks._dbos import _follow  # where the follower reads it

    use_dbos(project, run_executes="false")
    monkeypatch.setenv("KERNOS_STORE_URL", fresh_postgres_url)
    monkeypatch.setattr(_follow, "FOLLOW_SECONDS", 3600.0)
    server.script(text("the survey", when=agent_is("EXPLORE-AGENT"), repeat=True))
    worker(project, env(project, server))
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        session = runtime.session("main", record_turns=False)
        session.add_tools(manager.tools_for(session))
        call = {"prompt": "Survey.", "subagent_type": "explore"}
        (record,) = manager.spawn(session, manager.resolve(call, session), background=True)
        assert await manager.wait([record], timeout=60), "the end never reached the follower"
        assert record.status == "completed" and record.final_text == "the survey"
        assert record.executor not in (None, _dbos.executor_id())  # the worker ran it
        row = manager.store.get(record.id)
        assert row is not None and row["notified_epoch"] == 1  # its notice claimed, once
    finally:
        await manager.aclose(wait=False)  # its child ended (or the test failed: not waited)
        runtime.close()
