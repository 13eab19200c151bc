"""Recovery and the reaper: heartbeats, the children of a dead executor resumed or ended
``lost``, and a worker's leaving."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dbos import DBOS

from kernos.tasks._dbos._base import EngineBase
from kernos.tasks._dbos._follow import _WORKFLOWS_AT_ONCE
from kernos.tasks._dbos._launch import APP_VERSION, workflow_id
from kernos.tasks._state import ACTIVE, TaskStatus

if TYPE_CHECKING:
    from kernos.tasks._record import TaskRecord
    from kernos.tasks._store import TaskStore

log = logging.getLogger("kernos.tasks")

#: how often one run of a child is resumed after its executor died: a child that takes down every
#: process it runs on (a tool that exhausts memory, say) ends ``lost`` instead of making its way
#: through the fleet
MAX_RESUMES = 3


async def resume_left(dead: str, store: TaskStore) -> int:
    """Put each workflow a dead executor left running back on its own queue, to run from its
    last completed step on whichever executor takes it; how many.

    Each goes back on its model's queue (not DBOS's internal one, which every process polls:
    a ``kernos run`` that executes nothing would take it and end it unrun), so only that
    queue's listeners run it and the model's global limit counts it.

    Only the workflows whose runs are still active in the store, read after the listing: a
    child cancelled (``kernos tasks cancel``) or ended since the reaper read its row has its
    workflow cancelled instead; resumed, no executor would take it, and its record would say
    a success of a run that did nothing."""
    left = await DBOS.list_workflows_async(
        status="PENDING", executor_id=dead, app_version=APP_VERSION,
        load_input=False, load_output=False,
    )  # fmt: skip
    task_ids = [status.workflow_id.partition(".")[0] for status in left]
    rows = await asyncio.to_thread(store.rows, task_ids)
    active = {str(s) for s in ACTIVE}
    by_queue: dict[str | None, list[str]] = {}
    over: list[str] = []
    for status, task_id in zip(left, task_ids, strict=True):
        row = rows.get(task_id)
        run = workflow_id(task_id, int(row["run_epoch"] or 1)) if row is not None else None
        if row is None or row["status"] not in active or run != status.workflow_id:
            over.append(status.workflow_id)
            continue
        by_queue.setdefault(status.queue_name, []).append(status.workflow_id)
    if over:
        log.info("tasks: not resuming %d workflow(s) whose runs ended: %s", len(over), over)
        await DBOS.cancel_workflows_async(over)
    for queue, wf_ids in by_queue.items():
        await DBOS.resume_workflows_async(wf_ids, queue_name=queue)
    return len(left) - len(over)


class _Recovery(EngineBase):
    """Heartbeats and the reaper; a worker's leaving."""

    def leave(self) -> list[TaskRecord]:
        """Stop executing (``kernos worker`` on SIGTERM/SIGINT): no new child starts here, and
        the runs in flight stop. With ``on_crash = "resume"`` they stop without an end (their
        workflows stay pending) and another executor's reaper resumes each from its last
        completed step once this one has retired; otherwise they end ``lost``. Returns them."""
        self.stopping = True
        left = [r for r in self.scheduler.records.values() if r.status in ACTIVE]
        for record in left:
            if self.on_crash == "resume":
                record.leave = True
            else:
                record.end_as = TaskStatus.LOST
                record.error = f"its worker {self.executor} stopped before it finished"
            if record.runner is not None:
                record.runner.cancel()
        return left

    async def _beat_and_reap(self) -> None:
        """Heartbeat this executor; holding the reaper lease, settle the children of executors
        silent for three beats: resumed here (``on_crash = "resume"``) or ``lost``; and end
        ``lost`` the active children whose workflows are gone or ended (:meth:`_sweep`)."""
        store = self.scheduler.store
        first = True
        while True:
            try:
                await asyncio.to_thread(
                    store.beat, self.executor, self.listen, app_version=APP_VERSION
                )
                silent = self.heartbeat * 3
                reaps = self.remote is not None  # only an executor can resume what it reaps
                if reaps and await asyncio.to_thread(store.lease, "reaper", self.executor, silent):
                    await self._spread()  # first: a beat whose reaping fails still shares
                    for dead in await asyncio.to_thread(store.dead_executors, silent):
                        await self._reap(dead)
                    await self._sweep()
                else:  # another holds the lease: its sweep counts the graces from now on
                    self._swept = {}
                    if first and reaps and self.listen != []:
                        # joined: the reaper may have shared the queues before this beat
                        await self._spread()
                first = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("tasks: heartbeat or reaper failed: %s", exc)
            self.beaten.set()
            await asyncio.sleep(self.heartbeat)

    async def _reap(self, dead: str) -> None:
        store = self.scheduler.store
        rows = await asyncio.to_thread(store.running_on, dead)
        if self.on_crash == "resume":
            log.warning("tasks: executor %s is silent; resuming its %d task(s)", dead, len(rows))
            resumed = await asyncio.to_thread(store.resumes, [r["id"] for r in rows])
            for row in rows:
                epoch = row["run_epoch"]
                times = resumed.get((row["id"], epoch), 0)
                if times >= MAX_RESUMES:  # its workflow is cancelled: resume_left leaves it
                    reason = (
                        f"its executor stopped answering {times + 1} times while running it "
                        f"(last {dead}); it is not resumed again. Start it anew with the task "
                        "tool if its work is still needed."
                    )
                    await asyncio.to_thread(store.lose, row["id"], row["status"], reason)
                    await self._cancel_workflow(workflow_id(row["id"], epoch))
                    continue
                resume = {"epoch": epoch, "time": times + 1, "after": dead}
                store.event(row["id"], "resumed", resume)
                # no one's: any executor of its queue may take it, and a second reaper pass
                store.update(row["id"], if_active=True, executor=None)  # does not resume it
            store.flush()
            await resume_left(dead, store)
            return
        for row in rows:
            reason = f"its executor {dead} stopped answering before the task finished"
            await asyncio.to_thread(store.lose, row["id"], row["status"], reason)
            await self._cancel_workflow(workflow_id(row["id"], row["run_epoch"]))

    async def _recorded(self, wf_ids: Sequence[str], timeout: float = 10.0) -> None:
        """Wait until each workflow's body has recorded its outcome (it does so just after the
        run ended), so closing DBOS does not cut it short. One read of DBOS per 500 workflows
        still unrecorded, not one each: a run that executed 200 children spent 0.7 s of its
        end reading their statuses one by one (on PostgreSQL)."""
        deadline = time.monotonic() + timeout
        left = sorted(set(wf_ids))
        while left and time.monotonic() < deadline:
            found: list[Any] = []
            for at in range(0, len(left), _WORKFLOWS_AT_ONCE):
                found += await DBOS.list_workflows_async(
                    workflow_ids=left[at : at + _WORKFLOWS_AT_ONCE],
                    load_input=False, load_output=False,
                )  # fmt: skip
            left = sorted(w.workflow_id for w in found if w.status in ("PENDING", "ENQUEUED"))
            if left:
                await asyncio.sleep(0.02)

    async def _cancel_workflow(self, wf_id: str) -> None:
        try:
            if self._launched:
                await DBOS.cancel_workflow_async(wf_id)
        except Exception as exc:
            log.warning("task workflow %s: cancel failed: %s", wf_id, exc)
