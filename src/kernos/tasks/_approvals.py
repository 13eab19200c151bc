"""A child's asked calls, answered from any process: the durable approval request.

A child nobody at this process's terminal may be asked about (a background child, any child on a
worker) does not refuse an asked call: :class:`TaskWaiter` writes an approval request to the store
(:class:`kernos.runtime.ApprovalStore`), marks the task ``waiting``, tells the parent which request
it waits on, and waits until someone sharing the store answers (``kernos approve`` / ``kernos
deny``) or ``[permissions] wait`` passes. The request is keyed by the call (task, run epoch, call
id): a run resumed after a crash finds its own request, still waiting or answered, and does not
ask twice. A run that ends while waiting (cancelled, its budget spent) closes it as ``expired``.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import TYPE_CHECKING

from kernos.runtime import (
    ApprovalAnswer,
    ApprovalRequest,
    ApprovalState,
    ApprovalStore,
    StoredRequest,
    denial_reason,
)
from kernos.tasks._prompts import prompt_text
from kernos.tasks._state import TaskStatus
from kernos.tasks._store import executor_id

if TYPE_CHECKING:
    from kernos.tasks._engine import EngineHost
    from kernos.tasks._record import TaskRecord

log = logging.getLogger("kernos.tasks")

#: the first and the longest pause between two reads of a waiting request, in seconds
FIRST_POLL = 0.05
LONGEST_POLL = 1.0

#: who closes a request nobody answered in time, as its ``answered_by``
TIMEOUT_BY = "kernos"


def call_key(task_id: str, epoch: int, call_id: str | None) -> str:
    """The key of one asked call of one run: the same on every replay of that run."""
    return f"{task_id}:{epoch}:{call_id or 'x_' + secrets.token_hex(6)}"


#: how (and why) a request is closed when its task is interrupted while it waits
INTERRUPTED_HOW = "interrupt"
INTERRUPTED = "interrupted"


def answer_of(request: StoredRequest) -> ApprovalAnswer:
    """What the asked call gets for a request that is no longer open."""
    if request.answered_how == INTERRUPTED_HOW and request.state == ApprovalState.DENIED:
        return ApprovalAnswer(
            False,
            INTERRUPTED,
            "denied",
            f"{request.tool} was not run: the task was interrupted while approval request "
            f"{request.id} waited for a person",
            request_id=request.id,
        )
    if request.state == ApprovalState.APPROVED:
        return ApprovalAnswer(True, request_id=request.id)
    if request.state == ApprovalState.DENIED:
        return ApprovalAnswer(False, denial_reason(request), request_id=request.id)
    # timed out or expired: no person denied it, the text says what happened
    return ApprovalAnswer(
        False,
        denial_reason(request),
        "denied",
        f"{request.tool} was not run: {denial_reason(request)}; do the task without it or "
        "tell the user what you could not do",
        request_id=request.id,
    )


class TaskWaiter:
    """The :class:`kernos.runtime.Approver` of one child's session (``Session.waiter``)."""

    def __init__(self, scheduler: EngineHost, record: TaskRecord) -> None:
        self.scheduler = scheduler
        self.record = record

    @property
    def approvals(self) -> ApprovalStore:
        return ApprovalStore(self.scheduler.runtime.store)

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        record = self.record
        wait = self.scheduler.config.approval_wait(request.agent)
        if wait <= 0:
            return ApprovalAnswer(
                False,
                "",
                "denied",
                f"{request.tool} was not run: it needs a person's approval and [permissions] "
                f'wait is "0" (never wait); allow it in kernos.toml: [permissions] allow = '
                f'["{request.tool}"], or do the task without it',
                by=TIMEOUT_BY,
                how="[permissions] wait",
            )
        store = self.scheduler.runtime.store
        await store.flushed()
        stored = await asyncio.to_thread(
            lambda: self.approvals.ask(
                call_key(record.id, record.run_epoch, request.call_id), request, task_id=record.id
            )
        )
        if stored.state != ApprovalState.OPEN:  # a replayed call: answered while it was down
            return answer_of(stored)
        self.scheduler.waiting(record, stored)
        # a person's time is not the run's: its wall-clock budget stops while it waits
        loop = asyncio.get_running_loop()
        deadline, began = record.deadline, loop.time()
        due = deadline.when() if deadline is not None else None
        if deadline is not None and due is not None:
            deadline.reschedule(None)
        try:
            stored = await self._wait(stored, wait)
        except asyncio.CancelledError:
            if not record.leave:  # the run ends here; a run left to resume elsewhere still waits
                reason = "its task was cancelled or stopped"
                expire = asyncio.to_thread(self.approvals.expire_task, record.id, reason)
                await asyncio.shield(expire)
            raise
        if deadline is not None and due is not None:
            deadline.reschedule(due + (loop.time() - began))
        self.scheduler.resumed(record, stored)
        return answer_of(stored)

    async def _wait(self, stored: StoredRequest, wait: float) -> StoredRequest:
        """Poll the request until it is answered or ``wait`` after it was asked passes (then it
        is closed ``timed_out``, unless an answer came first)."""
        pause = FIRST_POLL
        deadline = stored.asked_at + wait
        while True:
            left = deadline - time.time()
            if left <= 0:
                _, now = await asyncio.to_thread(
                    self.approvals.settle,
                    stored.id,
                    ApprovalState.TIMED_OUT,
                    by=TIMEOUT_BY,
                    how="[permissions] wait",
                )
                return now or stored
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, LONGEST_POLL)
            if self.record.interrupt:  # stop waiting: denied, unless an answer came first
                _, now = await asyncio.to_thread(
                    self.approvals.settle,
                    stored.id,
                    ApprovalState.DENIED,
                    by=TIMEOUT_BY,
                    how=INTERRUPTED_HOW,
                    reason=INTERRUPTED,
                )
                return now or stored
            now = await asyncio.to_thread(self.approvals.get, stored.id)
            if now is not None and now.state != ApprovalState.OPEN:
                return now


def waiting_notice(record: TaskRecord, request: StoredRequest) -> str:
    """The parent's notice that ``record`` waits on ``request``."""
    return (
        prompt_text("approval_wait.md")
        .format(
            name=record.name or "-", task_id=record.id, tool=request.tool, request_id=request.id
        )
        .strip()
    )


def tell_waiting(
    scheduler: EngineHost, record: TaskRecord, request: StoredRequest, *, durable: bool
) -> None:
    """Tell ``record``'s parent that it waits on ``request``. A grandchild of a ``durable``
    engine (one that replays runs) tells it through its parent's inbox in the store, once per
    request: its parent is a durable run that reads it after its current turn, in whichever
    process runs either of them, and a replay of that run reads it again (as a grandchild's
    completion notice, ``TaskScheduler.notify``). Otherwise the parent's session is told."""
    notice = waiting_notice(record, request)
    if record.depth <= 1 or not durable:
        scheduler.tell_parent(record, notice)
        return
    key = f"approval:{request.id}"
    try:
        told = scheduler.store.tell_session(record.parent.session_id, notice, key)
    except Exception as exc:  # the store is unreachable: the notice is skipped, the wait goes on
        log.warning("task %s: its parent was not told it waits: %s", record.id, exc)
        return
    if told:
        scheduler.wake()


def expire_requests(scheduler: EngineHost, record: TaskRecord, status: TaskStatus) -> None:
    """Close ``record``'s open requests as its run ends ``status`` (nobody will wait on them)."""
    try:
        ApprovalStore(scheduler.runtime.store).expire_task(record.id, f"the task ended {status}")
    except Exception as exc:  # the store is unreachable: the reaper's lose() closes them later
        log.warning("task %s: its approval requests were not closed: %s", record.id, exc)


def follow_waiting(scheduler: EngineHost, record: TaskRecord, status: TaskStatus) -> None:
    """A child another process runs (the DBOS engine's follower read its row) started waiting:
    its parent here is told which request, as :meth:`TaskScheduler.waiting` tells it when the
    child runs here."""
    if status != TaskStatus.WAITING or record.status == TaskStatus.WAITING:
        return
    record.status = TaskStatus.WAITING
    if record.executor == executor_id() or record.depth > 1:
        return  # run here: told by waiting(); a grandchild's parent by its inbox (tell_waiting)
    asyncio.get_running_loop().create_task(_tell_waiting(scheduler, record))


async def _tell_waiting(scheduler: EngineHost, record: TaskRecord) -> None:
    approvals = ApprovalStore(scheduler.runtime.store)
    try:
        waiting = await asyncio.to_thread(approvals.open_for_task, record.id)
    except Exception as exc:  # the store is unreachable: the notice is skipped, the wait goes on
        log.warning("task %s: its approval request could not be read: %s", record.id, exc)
        return
    for request in waiting:
        scheduler.tell_parent(record, waiting_notice(record, request))
