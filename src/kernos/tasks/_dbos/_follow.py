"""Children other processes run: followed through the store; and the orphan guard, which ends
``lost`` a child whose workflow no executor will ever run."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from dbos import DBOS

from kernos.tasks._approvals import follow_waiting
from kernos.tasks._dbos._base import Ended, EngineBase
from kernos.tasks._dbos._launch import APP_VERSION, workflow_id
from kernos.tasks._state import ACTIVE, FINAL, NOTIFY, SETTLED, TaskStatus
from kernos.tasks._store import STATUS_CHANNEL

if TYPE_CHECKING:
    from kernos.tasks._record import TaskRecord

log = logging.getLogger("kernos.tasks")

#: how often the store is read for children other processes run, and heartbeats' reaper; on
#: PostgreSQL as soon as one's status changes (:data:`STATUS_CHANNEL`), at most once per
#: ``FOLLOW_MIN_SECONDS``
FOLLOW_SECONDS = 0.25
FOLLOW_MIN_SECONDS = 0.05
#: how often a follower asks DBOS whether the workflows of the children it waits on still exist
ORPHAN_CHECK_SECONDS = 1.0
#: how long a waited-on child may stay active in the store while its workflow does not exist or
#: has ended before the follower ends it ``lost`` (an executor commits a run's end to the store
#: before its workflow records its own, so this covers a slow store, not the normal order)
ORPHAN_GRACE_SECONDS = 3.0
#: the reaper's grace for an active child whose workflow does not exist: its spawner, alive,
#: may not have queued it yet (it commits each row first, then queues a batch one by one, and
#: only once DBOS launched); a follower checks only workflows it queued, so it needs none
ORPHAN_MISSING_SECONDS = 30.0
#: workflow ids per DBOS query of the orphan guard
_WORKFLOWS_AT_ONCE = 500
#: the DBOS statuses of a workflow that ended: no executor will run it again
_WORKFLOW_ENDED = frozenset({"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})
#: the DBOS statuses of a workflow waiting for an executor of its version: queued, or begun (its
#: executor's reaper resumes it, or DBOS recovers it when that executor starts again)
_WORKFLOW_WAITING = frozenset({"ENQUEUED", "PENDING"})


def stranded(status: str, version: str | None, live: Collection[str | None]) -> bool:
    """Whether a workflow of DBOS ``status`` and application ``version`` waits for an executor
    that is not there: queued or begun under another version than :data:`APP_VERSION` (DBOS
    runs a workflow only on an executor of its own version), which none of the live executors
    runs (``live``: their versions; ``None`` among them is an executor that does not say, an
    older kernos, which may run it). A workflow of no version is run by the latest one."""
    return (
        status in _WORKFLOW_WAITING
        and version is not None
        and version != APP_VERSION
        and version not in live
        and None not in live
    )


def _stranded_reason(wf_id: str, status: str, version: str) -> str:
    """What a child whose workflow is :func:`stranded` ends ``lost`` with: what happened, and
    what to do."""
    how = "queued by" if status == "ENQUEUED" else "begun by an executor of"
    return (
        f"its DBOS workflow {wf_id} was {how} {version}, which no live executor runs (this "
        f"one runs {APP_VERSION}, and DBOS runs a workflow only on an executor of its own "
        "version), so it would wait forever; start it again with the task tool (task_output "
        "shows what it did). To let such children finish instead, keep an executor of the "
        "older kernos running until they end"
    )


class _Following(EngineBase):
    """Mirrors the children other processes run, and ends their orphans."""

    async def _watch(self) -> None:
        """Every ``FOLLOW_SECONDS``, one read of the store for all the children this process
        waits on: resolve the admission of each queued child another process has taken, and
        mirror each child another process runs (:meth:`_follow`) until its run ends."""
        store = self.scheduler.store
        loop = asyncio.get_running_loop()
        heard = self._heard = asyncio.Event()

        def notified() -> None:  # (the listener's thread)
            with contextlib.suppress(RuntimeError):  # the loop closed
                loop.call_soon_threadsafe(heard.set)

        opening = asyncio.ensure_future(
            asyncio.to_thread(store.store.listen, STATUS_CHANNEL, notified)
        )
        try:
            with contextlib.suppress(Exception):  # said just below: polled only
                await asyncio.shield(opening)
            if opening.done() and opening.exception() is not None:
                log.warning("tasks: cannot listen for status changes: %s", opening.exception())
            await self._follow_store(heard)
        finally:
            stop = None
            with contextlib.suppress(Exception):  # stopped while it opened: once it is open
                stop = await asyncio.shield(opening)
            if stop is not None:
                await asyncio.shield(asyncio.to_thread(stop))

    async def _follow_store(self, heard: asyncio.Event) -> None:
        store = self.scheduler.store
        while True:
            # a status change another process committed (PostgreSQL) cuts the wait short, but
            # the store is read at most once per FOLLOW_MIN_SECONDS
            await asyncio.sleep(FOLLOW_MIN_SECONDS)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(heard.wait(), FOLLOW_SECONDS - FOLLOW_MIN_SECONDS)
            heard.clear()
            waiting = {wf: fut for wf, fut in self._admissions.items() if not fut.done()}
            followed = {i: f for i, f in self._followed.items() if not f[1].done()}
            if not waiting and not followed:
                continue
            by_task = {wf.partition(".")[0]: wf for wf in waiting}
            try:
                rows = await asyncio.to_thread(store.rows, [*by_task, *followed])
            except Exception as exc:
                log.warning("tasks: could not read queued children: %s", exc)
                continue
            for task_id, wf in by_task.items():
                row = rows.get(task_id)
                if row is None:
                    continue
                elsewhere = row["executor"] and row["executor"] != self.executor
                if elsewhere or row["status"] not in {str(s) for s in ACTIVE}:
                    future = waiting[wf]
                    if not future.done():
                        future.set_result(None)
            ended = [
                (record, future, rows.get(task_id))
                for task_id, (record, future) in followed.items()
                if self._mirror(record, future, rows.get(task_id))
            ]
            if ended:
                await self._ended(ended)
            if time.monotonic() - self._orphan_check >= ORPHAN_CHECK_SECONDS:
                active = {str(s) for s in ACTIVE}
                waited = {
                    task_id: (wf, rows[task_id])
                    for task_id, wf in by_task.items()
                    if wf in self._enqueued and task_id in rows
                }  # a child still being queued has no workflow yet: not checked
                waited.update(
                    (task_id, (workflow_id(task_id, rows[task_id]["run_epoch"]), rows[task_id]))
                    for task_id in followed
                    if task_id in rows
                )
                try:
                    await self._reconcile(
                        {i: w for i, w in waited.items() if w[1]["status"] in active}
                    )
                except Exception as exc:  # the next check tries again
                    log.warning("tasks: could not check the waited-on children: %s", exc)

    async def _reconcile(self, waited: dict[str, tuple[str, dict[str, Any]]]) -> None:
        """End ``lost`` each waited-on child (task id → its workflow and row, active) whose
        workflow does not exist or has ended for :data:`ORPHAN_GRACE_SECONDS` (see
        :meth:`_settle_orphans`); the follower then mirrors the end and claims its one notice
        as for any end."""
        self._orphan_check = time.monotonic()
        if not waited or not self._launched:
            self._orphans.clear()
            return
        self._orphans = await self._settle_orphans(waited, self._orphans, ORPHAN_GRACE_SECONDS)
        self.orphan_checks += 1

    async def _settle_orphans(
        self,
        runs: dict[str, tuple[str, dict[str, Any]]],
        seen: dict[str, float],
        missing_grace: float,
        versions: Collection[str | None] | None = None,
    ) -> dict[str, float]:
        """End ``lost`` each of ``runs`` (task id → its workflow and row, active) whose
        workflow has ended for :data:`ORPHAN_GRACE_SECONDS`, or does not exist for
        ``missing_grace``: no executor will ever run or finish it. ``seen``: since when each
        workflow was seen so (monotonic, by workflow id); returns it for the next check. A
        queued workflow (``ENQUEUED``: a busy worker, or no worker for its model yet) and a
        running one (``PENDING``: the reaper judges its executor) are left alone, unless
        ``versions`` (the application versions the live executors run, ``None``: not known)
        says it is :func:`stranded`: of an older kernos no live executor runs. That one is
        ended after :data:`ORPHAN_GRACE_SECONDS` too, and its workflow cancelled, so an
        executor of that version coming back does not run a task already ended. The end is
        written only over the active row of that run, so whoever ends a run first wins.

        One read of DBOS per 500 workflows, whoever asks: the follower for the children it
        waits on (:meth:`_reconcile`), the reaper for every active child (:meth:`_sweep`)."""
        ids = sorted({wf for wf, _ in runs.values()})
        found: list[Any] = []
        try:
            for at in range(0, len(ids), _WORKFLOWS_AT_ONCE):
                read = functools.partial(
                    DBOS.list_workflows, workflow_ids=ids[at : at + _WORKFLOWS_AT_ONCE],
                    load_input=False, load_output=False,
                )  # fmt: skip
                # on an executor thread, outside any workflow's context (a watcher started in
                # a child's run would otherwise record the read as a step of that workflow)
                found += await asyncio.get_running_loop().run_in_executor(None, read)
        except Exception as exc:  # the next check asks again
            log.warning("tasks: could not read the workflows of active children: %s", exc)
            return seen
        statuses = {found_wf.workflow_id: str(found_wf.status) for found_wf in found}
        of_version = {found_wf.workflow_id: found_wf.app_version for found_wf in found}
        now = time.monotonic()
        orphans: dict[str, float] = {}
        store = self.scheduler.store
        for task_id, (wf, row) in runs.items():
            status = statuses.get(wf)
            version = of_version.get(wf)
            strand = (
                versions is not None and status is not None
                and stranded(status, version, versions)
            )  # fmt: skip
            if status is not None and status not in _WORKFLOW_ENDED and not strand:
                continue
            since = orphans[wf] = seen.get(wf, now)
            if now - since < (missing_grace if status is None else ORPHAN_GRACE_SECONDS):
                continue
            if strand:
                reason = _stranded_reason(wf, str(status), str(version))
            else:
                if status is None:
                    what = f"its DBOS workflow {wf} does not exist (never queued, or deleted)"
                else:
                    what = (
                        f"its DBOS workflow {wf} ended ({status}) while the task was "
                        f"{row['status']}"
                    )
                reason = (
                    f"{what}, so no executor will ever run or finish it; start it again with "
                    "the task tool (task_output shows what it did)"
                )
            log.warning("task %s: %s", task_id, reason)
            ended = await asyncio.to_thread(
                store.lose, task_id, row["status"], reason, epoch=int(row["run_epoch"] or 1)
            )
            if ended and strand:  # an executor of its version coming back would run it
                await self._cancel_workflow(wf)
            del orphans[wf]
        return orphans

    async def _sweep(self) -> None:
        """(The reaper) :meth:`_settle_orphans` for every active child in the store, followed
        or not: a ``--no-wait`` run's background children, and those of a spawner that died,
        have no follower. A workflow that does not exist gets :data:`ORPHAN_MISSING_SECONDS`:
        a spawner commits each row before it queues the workflow, and queues a big batch one
        by one."""
        store = self.scheduler.store
        rows = await asyncio.to_thread(store.active_runs)
        runs = {r["id"]: (workflow_id(r["id"], int(r["run_epoch"] or 1)), r) for r in rows}
        if not runs:
            self._swept = {}
            return
        versions = await asyncio.to_thread(store.live_versions, self.heartbeat * 3)
        self._swept = await self._settle_orphans(
            runs, self._swept, ORPHAN_MISSING_SECONDS, versions
        )

    def _mirror(
        self,
        record: TaskRecord,
        ended: asyncio.Future[Ended],
        row: dict[str, Any] | None,
    ) -> bool:
        """Bring a followed child's record up to its row; ``True`` once its run ended."""
        if ended.done():
            return False
        if row is None:
            ended.set_result(None)  # the row is gone
            return False
        record.executor = row["executor"]
        try:
            status = TaskStatus(row["status"])
        except ValueError as exc:  # a status this version does not know: the follower fails
            ended.set_exception(exc)
            return False
        if status == TaskStatus.RUNNING and record.status != TaskStatus.RUNNING:
            record.status, record.started_at = status, row["started_at"]
            self.scheduler.wake()
        follow_waiting(self.scheduler, record, status)  # tasks/_approvals.py: the parent's notice
        return status in SETTLED or status in FINAL

    async def _ended(
        self, ended: list[tuple[TaskRecord, asyncio.Future[Ended], dict[str, Any] | None]]
    ) -> None:
        """Claim the notices of followed children whose runs ended (one claim for all), then
        hand each follower its row: claimed before the record shows the end, so no one sees
        a child ended while its notice is not in the outbox yet (the parent would stop)."""
        notify = {
            record.id
            for record, _, row in ended
            if row is not None and record.background and record.end_as is None
            and TaskStatus(row["status"]) in NOTIFY
        }  # fmt: skip
        # a grandchild's notice is claimed as it goes into its parent's inbox, in one
        # transaction (the scheduler's notify): not here
        runs = [(r.id, r.run_epoch) for r, _, _ in ended if r.id in notify and r.depth <= 1]
        try:
            claimed = await asyncio.to_thread(self.scheduler.store.claim_notices, runs)
        except Exception as exc:  # the next tick claims them again
            log.warning("tasks: could not claim completion notices: %s", exc)
            return
        claimed |= {r.id for r, _, _ in ended if r.id in notify and r.depth > 1}
        for record, future, row in ended:
            if not future.done() and row is not None:
                future.set_result((row, record.id in claimed))

    async def _follow(self, record: TaskRecord) -> None:
        """Mirror a child another process runs until its run ends; notice the parent once.

        The store is read by :meth:`_watch`, once per tick for every followed child (a run
        following hundreds of children on workers asks one query, not hundreds)."""
        assert self.loop is not None
        ended: asyncio.Future[Ended] = self.loop.create_future()
        self._followed[record.id] = (record, ended)
        if self._heard is not None:  # read at once: its status changed before it was followed
            self._heard.set()
        try:
            outcome = await ended
        finally:
            if record.id in self._followed and self._followed[record.id][1] is ended:
                del self._followed[record.id]
        if outcome is None:
            return
        row, claimed = outcome
        self._live.discard(record)
        record.status = TaskStatus(row["status"])
        record.final_text = row["final_text"] or ""
        record.error = row["error"]
        record.started_at = row["started_at"] or record.started_at
        record.finished_at = row["finished_at"]
        if claimed and record.end_as is None:  # once, whoever asks
            self.scheduler.notify(record)
        self.scheduler.wake()
