"""Children stranded by an application-version change end ``lost``, never stuck.

DBOS runs a workflow only on an executor of its own application version. After an upgrade that
bumps :data:`kernos.tasks._dbos.APP_VERSION`, a child whose workflow was queued or begun under
the old version waits for an executor of that version: once none is alive, the reaper ends it
``lost``, saying why, and cancels its workflow. While a live executor may run that version (it
says so in its beat, or it is an older kernos that says nothing), the child is left alone.

The workers are real ``kernos worker`` processes, on SQLite and on a real PostgreSQL; the old
version's children are put in the store and on their queues as an older kernos left them.
"""

from __future__ import annotations

import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_dbos import use_dbos
from test_dbos_cancel import DEADLINE, Store, tasks_config
from tests._wait import wait_for
from tests.conftest import Worker

from kernos.runtime import Runtime, load_config
from kernos.runtime import Store as RuntimeStore
from kernos.tasks import TaskManager
from kernos.tasks._dbos import APP_VERSION, ORPHAN_GRACE_SECONDS, queue_name, stranded
from kernos.tasks._store import MIGRATIONS, TaskStore
from kernos.testing import FakeOpenAIServer

OLD = "kernos-tasks-2"
MODEL = "openai-chat:test"


# -- the rule ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "version", "live", "expected"),
    [
        ("ENQUEUED", OLD, {APP_VERSION}, True),  # queued by an older kernos, none of it left
        ("PENDING", OLD, {APP_VERSION}, True),  # begun there, its executor gone
        ("ENQUEUED", OLD, set(), True),
        ("ENQUEUED", OLD, {APP_VERSION, OLD}, False),  # an executor of that version is alive
        ("PENDING", OLD, {APP_VERSION, None}, False),  # one that does not say may run it
        ("ENQUEUED", APP_VERSION, {APP_VERSION}, False),  # this version's: ours to run
        ("ENQUEUED", APP_VERSION, set(), False),
        ("ENQUEUED", None, {APP_VERSION}, False),  # no version: the latest one runs it
        ("SUCCESS", OLD, {APP_VERSION}, False),  # ended: the other orphan rule's
        ("CANCELLED", OLD, {APP_VERSION}, False),
    ],
)
def test_a_workflow_is_stranded_when_it_waits_for_a_version_no_live_executor_runs(
    status: str, version: str | None, live: set[str | None], expected: bool
) -> None:
    assert stranded(status, version, live) is expected


# -- the store: which version each executor runs -------------------------------------------------
def test_each_beat_records_the_executor_s_version_and_an_old_executor_s_is_unknown(
    store_target: str,
) -> None:
    """A store at migration 8 with an executor in it: migration 9 adds the column, NULL for
    the old executor (it may run any version); a beat records the version it names, a beat
    that names none clears it, and only executors that beat lately count."""
    store = RuntimeStore(store_target)
    store.migrate("tasks", MIGRATIONS[:8])
    store.execute(
        "INSERT INTO task_executors (id, beat_at, started_at) VALUES ('old:1', ?, 0)",
        (time.time(),),
    )
    tasks = TaskStore(store)
    try:
        assert store.versions("tasks") == [1, 2, 3, 4, 5, 6, 7, 8, 9]
        assert tasks.live_versions(60) == {None}
        tasks.beat("new:2", ["kernos.a"], app_version=APP_VERSION)
        tasks.beat("older:3", app_version=OLD)
        assert tasks.live_versions(60) == {None, APP_VERSION, OLD}
        assert tasks.serving(60) == {"old:1": None, "new:2": ["kernos.a"], "older:3": None}
        tasks.beat("old:1", app_version=APP_VERSION)
        assert tasks.live_versions(60) == {APP_VERSION, OLD}
        with store.transaction() as conn:  # silent for longer than the window
            conn.execute("UPDATE task_executors SET beat_at = 0 WHERE id = 'older:3'")
        assert tasks.live_versions(60) == {APP_VERSION}
        tasks.beat("new:2")  # says nothing this time: unknown again
        assert tasks.live_versions(60) == {None, APP_VERSION}
        tasks.retire("new:2")
        tasks.retire("old:1")
        assert tasks.live_versions(60) == set()
    finally:
        store.close()


# -- helpers: a store of either kind, and children an older kernos left in it ------------------
@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, project: Path) -> Store:
    if request.param == "sqlite":
        with (project / "kernos.toml").open("a", encoding="utf-8") as config:
            config.write('engine = "dbos"\n')
        return Store(project, None)
    return Store(project, str(request.getfixturevalue("fresh_postgres_url")))


def dbos_url(store: Store) -> str:
    return store.url or f"sqlite:///{store.project / '.kernos' / 'dbos.sqlite'}"


def open_tasks(store: Store) -> TaskStore:
    return TaskStore(RuntimeStore(store.url or str(store.project / ".kernos" / "kernos.db")))


def old_child(
    store: Store,
    tasks: TaskStore,
    task_id: str,
    version: str,
    *,
    begun_by: str | None = None,
) -> None:
    """A child as a kernos of application ``version`` left it: its row, and its workflow on
    its model's queue, queued (``ENQUEUED``, the row ``pending``) or, ``begun_by`` an
    executor that is gone, running there (``PENDING``, the row ``running`` on it)."""
    from dbos import DBOSClient, DBOSPortableJSONSerializer

    tasks.insert(
        {
            "id": task_id, "parent_session": "s_gone", "target_kind": "agent",
            "target": "explore", "model": MODEL, "created_at": time.time(),
            "status": "pending" if begun_by is None else "running", "residency": "resident",
            "engine": "dbos", "executor": begun_by,
        }
    )  # fmt: skip
    tasks.flush()
    client = DBOSClient(
        system_database_url=dbos_url(store), application_name="kernos",
        serializer=DBOSPortableJSONSerializer(),
    )  # fmt: skip
    try:
        client.enqueue(
            {"workflow_name": "kernos_child", "queue_name": queue_name(MODEL),
             "workflow_id": task_id, "app_version": version},
            task_id, "Survey the repository.", 1,
        )  # fmt: skip
    finally:
        client.destroy()
    if begun_by is not None:  # dequeued there (DBOS's own record), as test_dbos_races does
        where = "workflow_status" if store.url is None else "dbos.workflow_status"
        sql = f"UPDATE {where} SET status = 'PENDING', executor_id = ? WHERE workflow_uuid = ?"
        if store.url is None:
            with sqlite3.connect(store.project / ".kernos" / "dbos.sqlite") as db:
                db.execute(sql, (begun_by, task_id))
        else:
            import psycopg

            with psycopg.connect(store.url) as conn:
                conn.execute(sql.replace("?", "%s"), (begun_by, task_id))
    assert store.workflow(task_id) == ("ENQUEUED" if begun_by is None else "PENDING")


def cancel_workflow(store: Store, task_id: str) -> None:
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=dbos_url(store), application_name="kernos")
    try:
        client.cancel_workflow(task_id)
    finally:
        client.destroy()


def wait_row(store: Store, task_id: str, status: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        rows = {r["id"]: r for r in store.rows()}
        return rows[task_id] if rows[task_id]["status"] == status else None

    return wait_for(found, f"{task_id} {status}", DEADLINE)


def wait_workflow(store: Store, task_id: str, status: str) -> None:
    wait_for(
        lambda: store.workflow(task_id) == status, f"the workflow of {task_id} {status}", DEADLINE
    )


def beats(tasks: TaskStore, worker: Worker, count: int) -> None:
    """Until ``worker`` has beaten ``count`` more times: it writes its beat first, then
    (holding the reaper's lease) reaps and sweeps, so ``count`` beats span ``count - 1``
    sweeps begun and ended since this call."""
    executor = f"{socket.gethostname()}:{worker.pid}"
    query = "SELECT beat_at FROM task_executors WHERE id = ?"
    seen: list[float] = []

    def beaten() -> bool:
        (row,) = tasks.store.query(query, (executor,))
        if not seen or row["beat_at"] != seen[-1]:
            seen.append(row["beat_at"])
        return len(seen) > count

    wait_for(beaten, f"{count} more beats of {executor}", DEADLINE, alive=[worker])


def lost_events(tasks: TaskStore, task_id: str) -> list[dict[str, Any]]:
    return [e for e in tasks.events(task_id) if e["payload"].get("to") == "lost"]


# -- the sweep and the follower, driven one check at a time (SQLite, in process) ----------------
async def test_the_reaper_ends_a_stranded_child_after_the_grace_and_a_follower_leaves_it(
    project: Path, server: FakeOpenAIServer
) -> None:
    """The reaper's sweep sees a child an older kernos queued: its grace starts, the one any
    orphan whose workflow ended gets (not the longer one of a workflow not queued yet); past
    it the child is ``lost`` and its workflow cancelled. A follower, which does not read the
    executors' versions, leaves it alone however long it has waited: the reaper judges it."""
    from kernos.tasks._dbos import DBOSEngine

    use_dbos(project, run_executes="false")  # no sweep of its own: the test drives each one
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    engine = manager.engine
    assert isinstance(engine, DBOSEngine)
    await engine.ready()
    where = Store(project, None)
    try:
        old_child(where, manager.store, "t_strand01", OLD)
        row = manager.store.get("t_strand01")
        assert row is not None
        engine._orphans = {"t_strand01": time.monotonic() - 100}  # as if waited on long
        await engine._reconcile({"t_strand01": ("t_strand01", row)})
        assert where.rows()[0]["status"] == "pending"
        assert engine._orphans == {}
        await engine._sweep()  # first sight: the grace starts now
        assert where.rows()[0]["status"] == "pending"
        assert set(engine._swept) == {"t_strand01"}
        engine._swept = {
            wf: since - ORPHAN_GRACE_SECONDS - 1 for wf, since in engine._swept.items()
        }
        await engine._sweep()
        (lost,) = where.rows()
        assert lost["status"] == "lost"
        assert f"was queued by {OLD}, which no live executor runs" in lost["error"]
        assert where.workflow("t_strand01") == "CANCELLED"
        await engine._sweep()  # ended once
        assert len(lost_events(manager.store, "t_strand01")) == 1
    finally:
        await manager.aclose(wait=True)
        runtime.close()


# -- real workers, PostgreSQL and SQLite -------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("state", ["queued", "begun"])
def test_a_child_no_live_executor_can_run_since_an_upgrade_ends_lost_and_its_workflow_cancelled(
    project: Path,
    store: Store,
    server: FakeOpenAIServer,
    worker: Callable[..., Worker],
    state: str,
) -> None:
    """A child whose workflow an older kernos queued (or began, on an executor that is gone)
    would wait forever: a worker of this version ends it ``lost`` within a few beats, saying
    what happened and what to do, once, and cancels its workflow; it never reaches the
    model."""
    begun = state == "begun"
    if begun:  # "lost" would end it by the crash rule first; the reaper resumes it, which
        # DBOS cannot do for another version's workflow: the stranded rule ends it
        tasks_config(project, run_executes="false", heartbeat="0.5", on_crash='"resume"')
    else:
        tasks_config(project, run_executes="false", heartbeat="0.5")
    executing = worker(store.project, store.env(server))
    executing.wait_line(" executing ")  # DBOS launched, its queues polled, beating
    tasks = open_tasks(store)
    try:
        old_child(store, tasks, "t_strand01", OLD, begun_by="gone.example:1" if begun else None)
        lost = wait_row(store, "t_strand01", "lost")
        how = "begun by an executor of" if begun else "queued by"
        assert lost["error"].startswith(
            f"its DBOS workflow t_strand01 was {how} {OLD}, which no live executor runs "
            f"(this one runs {APP_VERSION}, "
        ), lost["error"]
        assert "start it again with the task tool" in lost["error"]
        wait_workflow(store, "t_strand01", "CANCELLED")
        assert len(lost_events(tasks, "t_strand01")) == 1
        assert server.requests == []  # never run
    finally:
        tasks.store.close()
    errors = "\n".join(executing.stop(signal.SIGTERM))
    assert executing.proc.returncode == 0, errors
    assert "Traceback" not in errors


class OldExecutor:
    """An executor of another kernos that beats in the store (as its reaper would see it)
    until :meth:`stop`: ``version`` the application version it says it runs (``None``: an
    older kernos that does not say)."""

    def __init__(self, tasks: TaskStore, version: str | None) -> None:
        self.tasks, self.version = tasks, version
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        while not self.stopped.is_set():
            self.tasks.beat("older.example:7", app_version=self.version)
            self.stopped.wait(0.2)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


@pytest.fixture
def old_executor(request: pytest.FixtureRequest, store: Store) -> Iterator[OldExecutor]:
    tasks = open_tasks(store)
    beating = OldExecutor(tasks, request.param)
    try:
        yield beating
    finally:
        beating.stop()
        tasks.store.close()


@pytest.mark.slow
@pytest.mark.parametrize("old_executor", [OLD, None], indirect=True, ids=["says", "silent"])
def test_a_child_of_an_older_kernos_is_left_alone_while_a_live_executor_may_run_it(
    project: Path,
    store: Store,
    server: FakeOpenAIServer,
    worker: Callable[..., Worker],
    old_executor: OldExecutor,
) -> None:
    """While an executor that runs the old version beats (one that says so, or an older
    kernos that says nothing), its queued child is left queued; a child whose workflow ended,
    swept beside it, ends ``lost`` meanwhile (so the sweeps ran). Once that executor is
    silent for three beats, the child ends ``lost`` too."""
    tasks_config(project, run_executes="false", heartbeat="0.5")
    executing = worker(store.project, store.env(server))
    executing.wait_line(" executing ")  # DBOS launched, its queues polled, beating
    tasks = old_executor.tasks
    old_child(store, tasks, "t_waits001", OLD)
    old_child(store, tasks, "t_ended001", OLD)
    cancel_workflow(store, "t_ended001")
    wait_row(store, "t_ended001", "lost")  # after the grace, seen by every sweep since
    beats(tasks, executing, 3)  # two more sweeps, each whole (a beat begins with its write)
    rows = {r["id"]: r for r in store.rows()}
    assert rows["t_waits001"]["status"] == "pending", rows
    assert store.workflow("t_waits001") == "ENQUEUED"
    old_executor.stop()
    lost = wait_row(store, "t_waits001", "lost")
    assert f"was queued by {OLD}, which no live executor runs" in lost["error"]
    wait_workflow(store, "t_waits001", "CANCELLED")
    assert server.requests == []
    errors = "\n".join(executing.stop(signal.SIGTERM))
    assert executing.proc.returncode == 0, errors
    assert "Traceback" not in errors
