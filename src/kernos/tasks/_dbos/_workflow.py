"""The child workflow DBOS runs, and the hand-over of each run between DBOS's loop and the
scheduler's."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import time
from typing import Any

from dbos import DBOS

from kernos.tasks._dbos._base import ContextItems, EngineBase
from kernos.tasks._dbos._launch import workflow_id
from kernos.tasks._state import TaskStatus

log = logging.getLogger("kernos.tasks")

#: the engines of this process, which the workflow body hands each run to: each one's hand-over
#: part (:class:`_HandOver`) is all the workflow needs of it, so this module never imports the
#: engine that joins the parts (:mod:`kernos.tasks._dbos._engine`)
_ENGINES: list[_HandOver] = []
#: engines of this process whose DBOS launched (or is launching) but that are not in
#: :data:`_ENGINES` yet: a workflow DBOS dequeues meanwhile waits for them
_BOOTING: list[_HandOver] = []
#: how long a dequeued workflow waits for an engine of this process to register
REGISTER_WAIT_SECONDS = 30.0


#: the context variables a workflow body hands over to its run (what makes DBOS count a call
#: as the workflow's): reset in the runs a child's run starts (:func:`outside_workflows`)
_WORKFLOW_VARS: set[contextvars.ContextVar[Any]] = set()


def outside_workflows() -> contextvars.Context | None:
    """A copy of the current context in which DBOS sees no workflow: what a child's run (a
    workflow's, maybe in a step) starts its own children's runs and followers in. There each
    child is a workflow of its own, queued under its task id, not a DBOS child workflow of the
    run that spawned it: those DBOS numbers by the spawner's step counter at the moment of the
    call, which a replay does not reproduce for a run started beside the spawner's steps, and
    from inside a step DBOS refuses to start one at all. ``None`` outside any workflow: the
    current context as it is (``create_task``'s default)."""
    if DBOS.workflow_id is None:
        return None
    context = contextvars.copy_context()
    blank = contextvars.Context()
    for var in list(_WORKFLOW_VARS):
        try:
            value = blank.run(var.get)  # its default; a variable without one is left as is
        except LookupError:
            continue
        context.run(var.set, value)
    return context


@DBOS.workflow(name="kernos_child")
async def child_workflow(task_id: str, text: str, epoch: int) -> str:
    """One run of a child task; returns the status it ended in."""
    items: ContextItems = list(contextvars.copy_context().items())
    _WORKFLOW_VARS.update(var for var, _ in items)
    deadline = time.monotonic() + REGISTER_WAIT_SECONDS
    while True:
        for engine in list(_ENGINES):
            if engine.owns(task_id, epoch):
                return await engine.hand_over(task_id, epoch, items)
        remote = [e for e in _ENGINES if e.remote is not None]
        remote.sort(key=lambda e: e.leaving)  # one still executing first
        if remote:
            return await remote[0].hand_over_remote(task_id, text, epoch, items)
        if not _BOOTING or time.monotonic() > deadline:
            break
        # DBOS launched and dequeued it before this process's engine registered (it does so
        # on the loop, just after the launch): ended "unowned", its child would be lost
        await asyncio.sleep(0.02)
    log.warning("task %s: no engine of this process can run it; left to another", task_id)
    return "unowned"


class _HandOver(EngineBase):
    """Runs handed over by DBOS: this process's own, and other processes' children."""

    def owns(self, task_id: str, epoch: int) -> bool:
        """Run ``epoch`` of ``task_id`` is this engine's own, waiting for its admission."""
        return workflow_id(task_id, epoch) in self._admissions

    async def run_remote(self, task_id: str, text: str, epoch: int, items: ContextItems) -> str:
        """Run a child another process spawned (or one whose executor died), rebuilt from the
        store and this process's config; its end status."""
        store = self.scheduler.store
        if self.leaving:
            return await self._leave_unrun(task_id)
        row = await self._take(task_id)
        if row is None:  # cancelled, lost, done, or another executor's
            return "skipped"
        if row["cancel_requested"]:  # the row as taken: no second query per child
            # cancelled while it waited in the queue: its spawner may be gone, so it ends here
            reason = "cancelled from the command line before it started"
            await asyncio.to_thread(
                store.update, task_id, if_active=True, status=str(TaskStatus.CANCELLED),
                finished_at=time.time(),
            )  # fmt: skip
            store.event(task_id, "status", {"from": row["status"], "to": "cancelled",
                                            "why": reason})  # fmt: skip
            store.flush()
            return str(TaskStatus.CANCELLED)
        record = self.scheduler.rebuild(row, epoch)
        if record is None:  # this scheduler runs only its own children
            return "skipped"
        record.executor = self.executor
        record.runner = asyncio.current_task()
        self.scheduler.records[record.id] = record
        self.scheduler.watch_cancels()
        for var, value in items:
            var.set(value)
        if self.on_child is not None:
            self.on_child("took", record)
        try:
            await self.scheduler.run_child(record, text)
        finally:
            if not record.leave:  # a left workflow's record is what another executor resumes
                self._finished.append(workflow_id(task_id, epoch))
            if self.on_child is not None:
                self.on_child("ended", record)
        try:  # the end in the store before the workflow's: a follower never sees it the other
            await store.store.flushed()  # way round unless no one wrote the end (see _reconcile)
        except Exception as exc:  # kept for the store's retry; the follower's grace covers it
            log.warning("task %s: its end is not committed yet: %s", task_id, exc)
        return str(record.status)

    @property
    def leaving(self) -> bool:
        """This process runs no new child: a worker stops (:meth:`leave`), or a run ends
        without waiting for its children (``--no-wait``)."""
        return self.stopping or self.scheduler.abandoning

    async def _leave_unrun(self, task_id: str) -> str:
        """A child DBOS handed to this process as it leaves: taken (``running``: admitted),
        then left unfinished (the body stops, its workflow stays pending), so the reaper of
        another executor settles it once this one retired, by the crash rule (resumed from its
        start, or ``lost``), as for any child of an executor that is gone. Not taken (it was
        cancelled, or ended): its workflow ends (``skipped``).

        On the loop, not a thread: the process is closing, and DBOS's release shuts down the
        thread pool the loop uses; a few milliseconds of store writes are all it costs."""
        store = self.scheduler.store
        taken = store.take(self.executor, [task_id]).get(task_id)
        if taken is None:
            return "skipped"
        log.info("task %s: dequeued as this process leaves; left to the crash rule", task_id)
        if taken["status"] == str(TaskStatus.PENDING):
            store.update(task_id, if_active=True, status=str(TaskStatus.RUNNING))
            store.event(task_id, "status", {"from": "pending", "to": "running"})
        store.flush()
        raise asyncio.CancelledError

    async def _take(self, task_id: str) -> dict[str, Any] | None:
        """Claim ``task_id`` for this executor; its row as taken (``None``: not taken). The
        children DBOS hands over meanwhile are taken together, in one statement."""
        assert self.loop is not None
        taken: asyncio.Future[dict[str, Any] | None] = self.loop.create_future()
        self._to_take.setdefault(task_id, []).append(taken)
        if self._taker is None or self._taker.done():
            self._taker = self.loop.create_task(self._take_waiting())
        return await taken

    async def _take_waiting(self) -> None:
        store = self.scheduler.store
        await asyncio.sleep(0)  # the hand-overs of this loop turn join the first take
        while self._to_take:
            waiting, self._to_take = self._to_take, {}
            try:
                rows = await asyncio.to_thread(store.take, self.executor, list(waiting))
            except Exception as exc:
                for futures in waiting.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(exc)
                continue
            for task_id, futures in waiting.items():
                for n, future in enumerate(futures):  # the same task twice: the first gets it
                    if not future.done():
                        future.set_result(rows.get(task_id) if n == 0 else None)

    async def hand_over(self, task_id: str, epoch: int, items: ContextItems) -> str:
        """(DBOS's loop) Run this process's own child on the scheduler's loop; its end status."""
        assert self.loop is not None
        handed: concurrent.futures.Future[str] = asyncio.run_coroutine_threadsafe(
            self._admit(workflow_id(task_id, epoch), task_id, items), self.loop
        )
        return await asyncio.wrap_future(handed)

    async def _admit(self, wf_id: str, task_id: str, items: ContextItems) -> str:
        """(The scheduler's loop) Hand the dequeued run to its waiting :meth:`_run`; the
        status it ended in. Dequeued as this process leaves (before or after its run stopped
        waiting), it is left unrun (:meth:`_leave_unrun`), not ended ``cancelled``: a run
        that exits leaves its queued children to the other executors."""
        if self.leaving:
            return await self._leave_unrun(task_id)
        admitted = self._admissions.get(wf_id)
        if admitted is None or admitted.done():
            return "cancelled"  # the run was cancelled while it waited in the queue
        assert self.loop is not None
        done: asyncio.Future[str] = self.loop.create_future()
        admitted.set_result((items, done))
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            if done.cancelled():  # admitted as the process left, before its run started
                return await self._leave_unrun(task_id)
            raise

    async def hand_over_remote(self, task_id: str, text: str, epoch: int, items: Any) -> str:
        """(DBOS's loop) Run another process's child here (see ``remote``)."""
        assert self.loop is not None and self.remote is not None
        remote = self.remote

        async def run() -> str:
            return await remote(task_id, text, epoch, items)

        handed = asyncio.run_coroutine_threadsafe(run(), self.loop)
        result: str = await asyncio.wrap_future(handed)
        return result
