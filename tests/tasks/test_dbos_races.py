"""Interleavings of the DBOS task engine, each forced by ordering on the scheduler's
loop, not by sleeps: a run exiting (``--no-wait``) as DBOS hands it a child, and a cancel
between the reaper's read of a dead executor's children and its resume of their workflows."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is
from tests import _wait as wait

from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager
from kernos.testing import FakeOpenAIServer, text

DEADLINE = 60.0


def use_dbos(project: Path, **tasks: str) -> None:
    """The project's ``[tasks]`` section (the last of the test config) on the DBOS engine."""
    lines = ['engine = "dbos"', *(f"{k} = {v}" for k, v in tasks.items())]
    with (project / "kernos.toml").open("a", encoding="utf-8") as config:
        config.write("\n".join(lines) + "\n")


async def enqueued(workflow: str) -> None:
    """Until DBOS holds ``workflow`` (the spawn queues it in the background)."""
    from dbos import DBOS

    status = await wait.until(
        lambda: DBOS.get_workflow_status_async(workflow), f"{workflow} to be queued", DEADLINE
    )
    assert status.status == "ENQUEUED"


# -- a run that exits as DBOS hands it a child ------------------------------------------------
async def queued_here(project: Path) -> tuple[Runtime, TaskManager, Any, Any]:
    """A background child spawned and queued by a manager whose process dequeues nothing
    itself (``listen=[]``): the test hands the workflow over, at a set moment, as DBOS would.
    Returns the runtime, the manager, its engine and the child's record."""
    from kernos.tasks._dbos import DBOSEngine

    use_dbos(project)
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime, engine=lambda s: DBOSEngine(s, listen=[]))
    engine = manager.engine
    assert isinstance(engine, DBOSEngine)
    await engine.ready()
    session = runtime.session("main", record_turns=False)
    session.add_tools(manager.tools_for(session))
    call = {"prompt": "Survey.", "subagent_type": "explore"}
    (record,) = manager.spawn(session, manager.resolve(call, session), background=True)
    await enqueued(record.id)
    return runtime, manager, engine, record


#: when DBOS hands the queued child to the exiting run, as ``child_workflow`` does once dequeued:
#: ``admitted``: to its waiting run (``_admit``, which ``hand_over`` runs on this loop) just
#: before the run stops waiting; ``own``: to that run just after it stopped (``hand_over``);
#: ``remote``: after it, as a child of another process (``hand_over_remote``: the run no longer
#: knows it as its own)
WHEN = ["admitted", "own", "remote"]


@pytest.mark.parametrize("when", WHEN)
async def test_a_child_dequeued_as_a_no_wait_run_exits_is_left_unrun_to_the_crash_rule(
    project: Path, server: FakeOpenAIServer, when: str
) -> None:
    """The run leaves its queued children to the other executors. One that DBOS dequeues into
    the exiting run anyway is not run there, nor ended ``cancelled`` (its workflow a success
    of nothing, or a run cut short by the exit): it is taken by this executor and its workflow
    left pending, so once this executor retired the reaper of another resumes it or ends it
    ``lost`` (``[tasks] on_crash``), as any child of an executor that is gone."""
    server.script(text("the survey", when=agent_is("EXPLORE-AGENT"), repeat=True))
    runtime, manager, engine, record = await queued_here(project)
    try:
        hand: Callable[[], Awaitable[str]] = {
            "admitted": lambda: engine._admit(record.id, record.id, []),
            "own": lambda: engine.hand_over(record.id, 1, []),
            "remote": lambda: engine.hand_over_remote(record.id, "Survey.", 1, []),
        }[when]
        if when == "admitted":  # the hand-over's step runs first, then the exit's
            handed = asyncio.ensure_future(hand())
            closing = asyncio.ensure_future(manager.aclose(wait=False))
        else:  # the exit's first step (it stops the run's wait) runs first
            closing = asyncio.ensure_future(manager.aclose(wait=False))
            handed = asyncio.ensure_future(hand())
        done, _ = await asyncio.wait({handed, closing}, timeout=DEADLINE)
        assert handed in done, "the hand-over never returned (its workflow would hang)"
        assert closing in done, "the run never finished closing"
        closing.result()
        # the body stops without an outcome: the workflow stays pending for the crash rule
        assert handed.cancelled() or isinstance(handed.exception(), asyncio.CancelledError), (
            handed.result()
        )
        row = manager.store.get(record.id)
        assert row is not None
        assert (row["status"], row["executor"]) == ("running", engine.executor), row
        assert not [r for r in server.requests if agent_is("EXPLORE-AGENT")(r)]  # never run
    finally:
        runtime.close()


async def test_a_child_cancelled_as_it_is_handed_over_ends_its_workflow_too(
    project: Path, server: FakeOpenAIServer
) -> None:
    """The parent cancels a child (``task_cancel``) in the loop turn DBOS handed it over, before
    its run started: the child ends ``cancelled`` and so does the hand-over, instead of the
    workflow waiting for a run that never comes."""
    runtime, manager, engine, record = await queued_here(project)

    async def cancel() -> None:
        assert manager.cancel(record, "not needed")

    try:
        handed = asyncio.ensure_future(engine._admit(record.id, record.id, []))
        cancelling = asyncio.ensure_future(cancel())  # after the hand-over's step, before the run's
        done, _ = await asyncio.wait({handed, cancelling}, timeout=DEADLINE)
        cancelling.result()
        assert handed in done, "the hand-over never returned (its workflow would hang)"
        assert handed.result() == "cancelled"
        assert await manager.wait([record], timeout=DEADLINE)
        assert record.status == "cancelled"
        row = manager.store.get(record.id)
        assert row is not None and row["status"] == "cancelled"
        assert not [r for r in server.requests if agent_is("EXPLORE-AGENT")(r)]  # never run
    finally:
        await manager.aclose(wait=True)
        runtime.close()


# -- a cancel between the reaper's read and its resume ------------------------------------------
async def test_a_child_cancelled_after_the_reaper_read_it_is_not_resumed(
    project: Path, server: FakeOpenAIServer
) -> None:
    """``on_crash = "resume"``: the reaper read a dead executor's running children, then one is
    cancelled (``kernos tasks cancel``, before ``resume_left``). Its workflow is cancelled, not
    resumed (no executor would run it, and it would end a success of nothing); the other's is
    back on its queue."""
    from dbos import DBOS, SetWorkflowID

    from kernos.tasks._dbos import DBOSEngine, child_workflow, queue_name, resume_left

    use_dbos(project, run_executes="false")  # this process neither runs nor reaps: the test
    runtime = Runtime(load_config(cwd=project))  # plays the reaper, at the set moments
    manager = TaskManager(runtime)
    engine = manager.engine
    assert isinstance(engine, DBOSEngine)
    await engine.ready()
    dead, model = "gone.example:1", "openai-chat:test"
    ids = ["t_dead0001", "t_dead0002"]
    try:
        for task_id in ids:
            manager.store.insert(
                {
                    "id": task_id, "parent_session": "s_gone", "target_kind": "agent",
                    "target": "explore", "model": model, "status": "running",
                    "residency": "resident", "created_at": time.time(), "engine": "dbos",
                    "executor": dead,
                }
            )  # fmt: skip
            with SetWorkflowID(task_id):
                await DBOS.enqueue_workflow_async(
                    queue_name(model), child_workflow, task_id, "Survey.", 1
                )
        manager.store.flush()
        # as the dead executor left them: dequeued there, running (DBOS's own record)
        with sqlite3.connect(project / ".kernos" / "dbos.sqlite") as db:
            db.execute(
                "UPDATE workflow_status SET status = 'PENDING', executor_id = ? "
                "WHERE workflow_uuid IN (?, ?)",
                (dead, *ids),
            )
        assert len(manager.store.running_on(dead)) == 2  # what the reaper read
        for task_id in ids:  # what it wrote before resuming: no one's
            manager.store.update(task_id, if_active=True, executor=None)
        changed, said = manager.store.cancel(ids[0])  # the cancel lands now
        assert changed and "no executor had taken it" in said, said
        assert await resume_left(dead, manager.store) == 1
        statuses = {}
        for task_id in ids:
            status = await DBOS.get_workflow_status_async(task_id)
            assert status is not None
            statuses[task_id] = status.status
        assert statuses == {ids[0]: "CANCELLED", ids[1]: "ENQUEUED"}
        row = manager.store.get(ids[0])
        assert row is not None and row["status"] == "cancelled"
    finally:
        await manager.aclose(wait=True)
        runtime.close()


# -- the reaper's sweep: every active child, followed or not ------------------------------------
async def test_the_reaper_s_sweep_ends_lost_the_dbos_children_no_workflow_will_run(
    project: Path, server: FakeOpenAIServer
) -> None:
    """Each sweep reads every active child of the DBOS engine: one whose workflow ended is
    ``lost`` after the grace, one whose workflow does not exist only after the longer one (its
    spawner may not have queued it yet), a queued one never; a local-engine child in the same
    store is not the engine's. Driven sweep by sweep, the graces past by the times seen."""
    from dbos import DBOS, SetWorkflowID

    from kernos.tasks import _dbos
    from kernos.tasks._dbos import DBOSEngine, child_workflow, queue_name

    use_dbos(project, run_executes="false")  # no sweep of its own: the test drives each one
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    engine = manager.engine
    assert isinstance(engine, DBOSEngine)
    await engine.ready()
    model = "openai-chat:test"
    kinds = {"t_gone0001": "dbos", "t_ended001": "dbos", "t_queued01": "dbos",
             "t_local001": "local"}  # fmt: skip
    try:
        for task_id, kind in kinds.items():
            manager.store.insert(
                {
                    "id": task_id, "parent_session": "s_gone", "target_kind": "agent",
                    "target": "explore", "model": model, "status": "running",
                    "residency": "resident", "created_at": time.time(), "engine": kind,
                }
            )  # fmt: skip
        for task_id in ("t_ended001", "t_queued01"):
            with SetWorkflowID(task_id):
                await DBOS.enqueue_workflow_async(
                    queue_name(model), child_workflow, task_id, "Survey.", 1
                )
        await DBOS.cancel_workflow_async("t_ended001")

        def statuses() -> dict[str, str]:
            return {i: r["status"] for i, r in manager.store.rows(list(kinds)).items()}

        def seen_before(seconds: float) -> None:
            engine._swept = {wf: since - seconds for wf, since in engine._swept.items()}

        await engine._sweep()  # first sight: each grace starts now
        assert set(engine._swept) == {"t_gone0001", "t_ended001"}
        assert set(statuses().values()) == {"running"}
        seen_before(_dbos.ORPHAN_GRACE_SECONDS + 1)
        await engine._sweep()
        assert statuses() == {"t_gone0001": "running", "t_ended001": "lost",
                              "t_queued01": "running", "t_local001": "running"}  # fmt: skip
        ended = manager.store.get("t_ended001")
        assert ended is not None and "t_ended001 ended (CANCELLED)" in ended["error"]
        seen_before(_dbos.ORPHAN_MISSING_SECONDS + 1)
        await engine._sweep()
        assert statuses() == {"t_gone0001": "lost", "t_ended001": "lost",
                              "t_queued01": "running", "t_local001": "running"}  # fmt: skip
        gone = manager.store.get("t_gone0001")
        assert gone is not None and "t_gone0001 does not exist" in gone["error"]
        await engine._sweep()  # ended once: one status event each
        for task_id in ("t_gone0001", "t_ended001"):
            events = manager.store.events(task_id)
            assert sum(1 for e in events if e["payload"].get("to") == "lost") == 1
    finally:
        await manager.aclose(wait=True)
        runtime.close()


# -- a run executes other processes' children from its start -----------------------------------
async def test_a_run_that_spawned_nothing_yet_runs_another_process_s_queued_child(
    project: Path, server: FakeOpenAIServer
) -> None:
    """``kernos run`` executes children of other processes too (``run_executes``), and its DBOS
    listens to the queues from its launch, before the run spawned anything: a child DBOS
    hands it then is run, not ended ``unowned`` (a success of nothing, the child left active
    for the orphan guard to end ``lost``)."""
    from dbos import DBOS, SetWorkflowID

    from kernos.tasks._dbos import DBOSEngine, child_workflow, queue_name

    use_dbos(project)
    server.script(text("the survey", when=agent_is("EXPLORE-AGENT"), repeat=True))
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)  # as a run builds it: no spawn, no ready() yet
    engine = manager.engine
    assert isinstance(engine, DBOSEngine)
    model = "openai-chat:test"
    try:
        await asyncio.to_thread(engine._boot.join)  # DBOS launched: its queues are polled
        manager.store.insert(
            {
                "id": "t_other001", "parent_session": "s_elsewhere", "target_kind": "agent",
                "target": "explore", "model": model, "status": "pending",
                "residency": "resident", "created_at": time.time(), "engine": "dbos",
                "prompt": "Survey.",
            }
        )  # fmt: skip
        manager.store.flush()
        with SetWorkflowID("t_other001"):  # what the other process queued
            handle = await DBOS.enqueue_workflow_async(
                queue_name(model), child_workflow, "t_other001", "Survey.", 1
            )
        assert await asyncio.wait_for(handle.get_result(), DEADLINE) == "completed"
        row = manager.store.get("t_other001")
        assert row is not None and row["status"] == "completed", row
        assert row["executor"] == engine.executor
    finally:
        await manager.aclose(wait=True)
        runtime.close()
