"""The task scheduler: per-model slots, the run loop, status transitions and completion notices
(docs/architecture.md, "The task lifecycle").

It runs children whose sessions are already built: the :class:`kernos.tasks.TaskManager` that
holds a scheduler builds them and their tools, and answers what the scheduler asks of it through
:class:`RunHooks`. Every status change goes through :meth:`TaskScheduler.move`, which checks the
transition table, writes an event and wakes whoever waits for a change.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kernos.errors import ContextExhausted
from kernos.runtime import (
    BudgetExceeded,
    Runtime,
    Session,
    StoredRequest,
    format_duration,
    model_failure,
    model_target,
    scrub_text,
    span,
)
from kernos.tasks._approvals import tell_waiting
from kernos.tasks._engine import LocalEngine, TaskEngine, crash_mode, engine_name
from kernos.tasks._prompts import prompt_text

# TaskRecord lives below the engines (tasks/_record.py); named here too, where it was
from kernos.tasks._record import TaskRecord as TaskRecord
from kernos.tasks._record import compaction_note
from kernos.tasks._state import ACTIVE, FINAL, NOTIFY, SETTLED, Residency, TaskStatus, can_move
from kernos.tasks._store import TaskStore, executor_id

log = logging.getLogger("kernos.tasks")

#: How much of a final text a completion notice quotes.
NOTICE_RESULT_CHARS = 700

_CANCEL_POLL_SECONDS = 0.5


def make_engine(scheduler: TaskScheduler) -> TaskEngine:
    """The engine a scheduler's config chooses (:func:`kernos.tasks._engine.engine_name`)."""
    name = engine_name(scheduler.config, scheduler.config.store_url)
    if name == "dbos":
        from kernos.tasks._dbos import DBOSEngine  # DBOS is imported only when it runs

        return DBOSEngine(scheduler)
    return LocalEngine(scheduler)


class RunHooks:
    """What a scheduler asks of whoever builds its children (the ``TaskManager`` that holds
    it): each a method whose default does nothing, so a bare scheduler runs children as built."""

    def before_run(self, record: TaskRecord, session: Session) -> None:
        """Called as each run of ``record`` starts, after its budget is set (the team bound)."""

    async def take_mail(self, record: TaskRecord, ordinal: int) -> str | None:
        """Other mail ``record``'s run reads after its prompt number ``ordinal`` (team mail,
        see :mod:`kernos.tasks._teams`); ``None``: none."""
        return None

    def rebuild(self, row: dict[str, Any], epoch: int) -> TaskRecord | None:
        """A child another process spawned, rebuilt here from its store ``row`` to run its run
        ``epoch`` (the DBOS engine runs it); ``None``: it cannot be rebuilt here."""
        return None


class TaskScheduler:
    """Runs the children of one runtime under per-model limits and wakes their parents.

    Args:
        runtime: models, config and the store.
        reconcile: mark tasks left pending/running by a dead process ``lost`` on start.
        engine: makes the engine that runs the children (default: as configured, see
            :func:`make_engine`).
        hooks: what builds the children (default: :class:`RunHooks`, which rebuilds none).
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        reconcile: bool = True,
        engine: Callable[[TaskScheduler], TaskEngine] | None = None,
        hooks: RunHooks | None = None,
    ) -> None:
        self.hooks = hooks if hooks is not None else RunHooks()
        self.runtime = runtime
        self.config = runtime.config
        self.store = TaskStore(runtime.store)
        self.records: dict[str, TaskRecord] = {}
        self._engine: TaskEngine | None = None
        # made now: the DBOS engine starts launching at once
        self._engine = (engine or make_engine)(self)
        self._outbox: dict[str, tuple[Session, list[str]]] = {}
        self._flush_scheduled = False
        self._changed = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None
        #: :meth:`aclose` without waiting began: the active children are abandoned, and the
        #: engine starts no new one here (the DBOS engine leaves them to other executors)
        self.abandoning = False
        #: the children :meth:`aclose` without waiting left unfinished: each ends ``lost`` here
        #: or stays active, left to other executors (``kernos worker``, the DBOS engine)
        self.abandoned: list[TaskRecord] = []
        resume = crash_mode(self.config, runtime.config.store_url) == "resume"
        self.lost_on_start = self.store.reconcile(resume=resume) if reconcile else []

    # -- running -----------------------------------------------------------------------------
    @property
    def engine(self) -> TaskEngine:
        """What admits and runs the children (:mod:`kernos.tasks._engine`), made on first use."""
        if self._engine is None:
            self._engine = make_engine(self)
        return self._engine

    def queue_position(self, record: TaskRecord) -> int | None:
        return self.engine.queue_position(record)

    def start(self, record: TaskRecord, text: str) -> None:
        """Start (or queue) ``record``'s next run with ``text`` as its message."""
        self.engine.start(record, text)
        self.watch_cancels()

    def watch_cancels(self) -> None:
        """Poll the store for cancels from other processes while children are active."""
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll_cancels())

    def mark_running(self, record: TaskRecord) -> None:
        """The engine admitted ``record``: its run starts now."""
        if record.status != TaskStatus.RUNNING:
            record.started_at, record.finished_at = time.time(), None
            self.move(record, TaskStatus.RUNNING)

    async def run_child(self, record: TaskRecord, text: str) -> None:
        """One admitted run of ``record``'s session, to its end state (the engines call this),
        under its target's budget and in a ``kernos.task`` span."""
        # linked to the span current at start: the tool call that spawned or revived the child
        with span(
            "kernos.task", link=True, task_id=record.id, epoch=record.run_epoch,
            parent_session=record.parent.session_id, model=record.model_name,
        ) as traced:  # fmt: skip
            await self._run_child(record, text)
            traced.set(status=str(record.status), error=record.error)

    async def _run_child(self, record: TaskRecord, text: str) -> None:
        session = record.session
        assert session is not None
        record.executor = executor_id()  # whoever runs a run is its executor (a revived
        # child's row may still name a past run's process, which the reaper would judge dead)
        self.store.update(record.id, executor=record.executor)
        # each run (a spawn, a revival) has the whole budget of its target
        budget = self.config.task_budget(record.item.category, record.item.subagent_type)
        session.set_budget(budget)
        self.hooks.before_run(record, session)
        # a run the engine may replay (DBOS resumes it after a crash) keys its events and turns
        record.run_key = str(record.run_epoch) if self.engine.replays else None
        record.events_keyed, record.calls_keyed = 0, {}
        session.key_turns(record.run_key)
        # the wall clock starts when the engine admitted the child, not while it was queued
        deadline = record.deadline = asyncio.timeout(budget.timeout)
        try:
            self.mark_running(record)
            async with deadline:
                final = await session.prompt(text)
                takes = 0
                while not record.interrupt:
                    takes += 1
                    late = await self._take_messages(record, session, takes)
                    if late is None:
                        break
                    final = await session.prompt(late)
        except asyncio.CancelledError:
            if record.leave:
                raise  # no transition: the run resumes elsewhere from its last step
            record.finished_at = time.time()
            self.move(record, record.end_as or TaskStatus.CANCELLED)
        except Exception as exc:
            record.finished_at = time.time()
            if isinstance(exc, TimeoutError) and deadline.expired() and budget.timeout:
                shown = format_duration(budget.timeout)
                exc = BudgetExceeded("timeout", shown, f"ran {record.duration:.1f}s")
            if isinstance(exc, BudgetExceeded):  # the notice names the limit and its value
                record.error = prompt_text("limit_reached.md").format(
                    code=exc.code, limit=exc.limit, value=exc.value, used=exc.used
                )
                self.move(record, TaskStatus.ERROR, why=str(exc), code=exc.code)
            elif isinstance(exc, ContextExhausted):  # its status event carries the code
                record.error = scrub_text(self._failure_text(record, session, exc))
                self.move(record, TaskStatus.ERROR, why=record.error, code=exc.code)
            else:
                record.error = scrub_text(self._failure_text(record, session, exc))
                self.move(record, TaskStatus.ERROR)
        else:
            record.finished_at = time.time()
            record.final_text = final
            self.move(record, TaskStatus.INTERRUPTED if record.interrupt else TaskStatus.COMPLETED)
        finally:
            record.interrupt = False

    async def queued(self, records: Sequence[TaskRecord]) -> None:
        """Return once the engine holds ``records`` durably, where it can tell (a ``task`` call
        of a durable run waits for its children's queueing before its step is recorded)."""
        await self.engine.queued(records)

    async def send(self, record: TaskRecord, message: str) -> int | None:
        """Give an active child ``message`` for after its current turn; its place among the
        messages it has not read yet, or ``None`` when its run ended meanwhile (another process
        ran it; nothing is delivered). A run the engine may replay reads it from the store's
        inbox (committed before this returns), wherever it executes; otherwise from its
        session's queue. A send made in a step of a durable run is stored once, however often
        the step is replayed (the engine's ``send_key``)."""
        if not self.engine.replays:
            assert record.session is not None
            record.session.inject(message)
            return record.session.pending_messages
        # a send of a durable run carries its step's key, so a replay of the step after a crash
        # (the message committed, the step not recorded) does not deliver it again
        key = self.engine.send_key()
        return await asyncio.to_thread(self.store.send, record.id, message, key)

    async def _take_messages(
        self, record: TaskRecord, session: Session, ordinal: int
    ) -> str | None:
        """What ``record``'s run reads after its prompt number ``ordinal``, as one turn
        (``None``: nothing, or the run was interrupted). A durable run takes its messages from
        the store under the key ``EPOCH:mN``: a replay of the run takes the same ones again
        (see :meth:`TaskStore.take_messages`); the same query says whether it was asked to stop.
        Messages queued on the session itself (the notices of a child's own children, on the
        local engine; a durable run's come through its inbox, see :meth:`notify`) follow."""
        batch: list[str] = []
        if record.run_key is not None:
            take = self.store.take_messages
            batch, interrupted = await asyncio.to_thread(take, record.id, record.run_epoch, ordinal)
            if interrupted:  # asked from another process, since the cancel poll last looked
                record.interrupt = True
                return None
        mail = await self.hooks.take_mail(record, ordinal)
        if mail is not None:
            batch.append(mail)
        queued = session.take_queued()
        if queued is not None:
            batch.append(queued)
        return "\n\n".join(batch) if batch else None

    def rebuild(self, row: dict[str, Any], epoch: int) -> TaskRecord | None:
        """A child another process spawned, rebuilt here from its store ``row`` to run its run
        ``epoch`` (the DBOS engine runs it) by :attr:`hooks`; ``None``: not here."""
        return self.hooks.rebuild(row, epoch)

    def move(
        self,
        record: TaskRecord,
        target: TaskStatus,
        why: str | None = None,
        code: str | None = None,
    ) -> bool:
        """Apply one transition; a move the table forbids is logged and ignored."""
        current = record.status
        if current == target:
            return False
        if not can_move(current, target):
            log.warning("task %s: ignored transition %s → %s", record.id, current, target)
            self.store.event(record.id, "transition_ignored", {"from": current, "to": target})
            return False
        record.status = target
        fields: dict[str, Any] = {"status": str(target), "run_epoch": record.run_epoch}
        if target == TaskStatus.RUNNING:
            fields["started_at"] = record.started_at
            if record.executor:  # known when the run is admitted here (the local engine)
                fields["executor"] = record.executor
        ends = target in SETTLED or target in FINAL
        if ends:
            fields.update(
                finished_at=record.finished_at or time.time(),
                final_text=record.final_text,
                error=record.error,
            )
        # a run's end is written only over an active row: another process (a canceller, the
        # reaper) that ended it first keeps its end
        self.store.update(record.id, if_active=ends and current in ACTIVE, **fields)
        payload: dict[str, Any] = {"from": str(current), "to": str(target)}
        payload["epoch"] = record.run_epoch
        if why:
            payload["why"] = why
        if code:
            payload["code"] = code
        self.store.event(record.id, "status", payload)
        if record.background and target in NOTIFY and record.end_as is None:
            self.notify(record)
        self.wake()
        return True

    # -- notices -----------------------------------------------------------------------------
    def notice(self, record: TaskRecord) -> str:
        """The completion notice for ``record``'s latest run."""
        body = record.error if record.status != TaskStatus.COMPLETED else record.final_text
        text = prompt_text("completion_notice.md").format(
            name=record.name or "-",
            task_id=record.id,
            status=record.status,
            duration=f"{record.duration:.1f}s",
            result=json.dumps((body or "")[:NOTICE_RESULT_CHARS], ensure_ascii=False),
        )
        note = compaction_note(record)
        return f"{text}\n{note}" if note else text

    def notify(self, record: TaskRecord) -> None:
        """Deliver ``record``'s completion notice to its parent: a durable parent's inbox in
        the store, else the parent session's queue with the other notices of this loop turn."""
        parent = record.parent
        if record.depth > 1 and self.engine.replays:
            # the parent is a child whose run may be replayed, in any process: the notice goes
            # to its inbox, claimed in the same transaction (once, whoever delivers it), and
            # its run takes it after its prompt as it takes follow-ups (a replay, the same)
            text = self.notice(record)
            try:
                delivered = self.store.deliver_notice(
                    record.id, record.run_epoch, parent.session_id, text
                )
            except Exception as exc:  # the store is unreachable: the run's memory, as before
                log.warning("task %s: its notice is not in the store: %s", record.id, exc)
            else:
                if delivered:
                    self.wake()
                return
        _, notes = self._outbox.setdefault(parent.session_id, (parent, []))
        notes.append(self.notice(record))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_notices)

    def tell_parent(self, record: TaskRecord, text: str) -> None:
        """Queue ``text`` for ``record``'s parent, delivered with this loop turn's notices."""
        _, notes = self._outbox.setdefault(record.parent.session_id, (record.parent, []))
        notes.append(text)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_notices)

    # -- approval requests (kernos.tasks._approvals) -------------------------------------------
    def waiting(self, record: TaskRecord, request: StoredRequest) -> None:
        """``record``'s run waits on the approval request ``request``: its status is
        ``waiting`` and its parent is told which request, and how a person answers it."""
        self.move(record, TaskStatus.WAITING)
        self.store.event(record.id, "approval_asked", {"request": request.id, "tool": request.tool})
        tell_waiting(self, record, request, durable=self.engine.replays)

    def resumed(self, record: TaskRecord, request: StoredRequest) -> None:
        """The request ``record`` waited on was answered (or timed out): it runs again."""
        self.store.event(
            record.id,
            "approval_answered",
            {"request": request.id, "state": str(request.state), "by": request.answered_by},
        )
        if record.status == TaskStatus.WAITING:
            self.move(record, TaskStatus.RUNNING)

    def _flush_notices(self) -> None:
        """Everything ready in this loop turn goes to each parent as one message."""
        self._flush_scheduled = False
        outbox, self._outbox = self._outbox, {}
        for parent, notes in outbox.values():
            parent.inject("\n\n".join(notes))
        self.wake()

    def wake(self) -> None:
        """Wake whoever waits for a change (:meth:`change_event`)."""
        self._changed.set()
        self._changed = asyncio.Event()

    def change_event(self) -> asyncio.Event:
        """Set at the next change (a status, a notice, team mail); take it before checking."""
        return self._changed

    # -- queries -----------------------------------------------------------------------------
    def children(self, session: Session) -> list[TaskRecord]:
        return [r for r in self.records.values() if r.parent is session]

    def find(self, session: Session, key: str) -> TaskRecord | None:
        """A child of ``session`` by task id or name."""
        for record in self.records.values():
            if record.parent is session and (record.id == key or record.name == key):
                return record
        return None

    def _failure_text(self, record: TaskRecord, session: Session | None, exc: Exception) -> str:
        """A child's failure as the parent model and the store read it: a model request's as
        its one line (model, endpoint, fix), anything else as its type and first line."""
        model = session.model if session is not None else None
        target = model_target(record.model_name, self.config, model)
        failure = model_failure(exc, target)
        if failure is not None:
            return failure.line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{type(exc).__name__}: {first}" if first else type(exc).__name__

    def outstanding(self, session: Session | None = None) -> bool:
        """True while a child (of ``session``, or any) is active or a notice is not yet sent."""
        if session is None:
            return bool(self._outbox) or any(r.status in ACTIVE for r in self.records.values())
        if session.session_id in self._outbox:
            return True
        return any(r.status in ACTIVE for r in self.records.values() if r.parent is session)

    async def wait_change(self, session: Session | None = None) -> None:
        """Return at the next state change (immediately when nothing is outstanding)."""
        if self.outstanding(session):
            await self._changed.wait()

    async def wait(self, records: Iterable[TaskRecord], timeout: float | None = None) -> bool:
        """Wait until each record's current run has ended, or ``timeout`` seconds passed;
        ``True`` when every run ended."""
        runners = [r.runner for r in records if r.runner is not None and not r.runner.done()]
        if not runners:
            return True
        _, pending = await asyncio.wait(runners, timeout=timeout)
        return not pending

    def detach(self, records: Iterable[TaskRecord]) -> list[TaskRecord]:
        """Turn the still-active foreground children in ``records`` into background ones: their
        completion is then a notice to the parent, like any background child's. Returns them."""
        detached = [r for r in records if r.status in ACTIVE]
        for record in detached:
            record.background = True
            self.store.update(record.id, background=1)
        return detached

    async def wait_all(self) -> None:
        """Wait until no child is pending or running."""
        while True:
            runners = [r.runner for r in self.records.values() if r.runner and not r.runner.done()]
            if not runners:
                return
            await asyncio.wait(runners)

    # -- control -----------------------------------------------------------------------------
    def cancel(self, record: TaskRecord, reason: str | None = None) -> bool:
        """Stop a pending or running child (no notice); ``False`` when it was not active."""
        if record.status not in ACTIVE:
            return False
        record.end_as = TaskStatus.CANCELLED
        record.finished_at = time.time()
        self.move(record, TaskStatus.CANCELLED, why=reason or "cancelled by its parent")
        if record.runner is not None:
            record.runner.cancel()
        return True

    def cancel_all(self, reason: str) -> list[TaskRecord]:
        """Stop every pending or running child (``kernos run`` on SIGINT/SIGTERM); returns them."""
        return [record for record in list(self.records.values()) if self.cancel(record, reason)]

    def interrupt(self, record: TaskRecord) -> bool:
        """Stop a running child after its current step; its status becomes ``interrupted``. A
        child waiting for a person stops waiting: its request is denied as ``interrupted``
        (:class:`kernos.tasks._approvals.TaskWaiter`)."""
        durable = self.engine.replays
        stoppable = record.status in (TaskStatus.RUNNING, TaskStatus.WAITING)
        if not stoppable or (record.session is None and not durable):
            return False
        if durable:
            # in the store, committed: the executor running it, in whichever process, stops it
            # at its next poll (a resumed run of it too)
            if not self.store.request_interrupt(record.id, record.run_epoch):
                return False  # its run ended meanwhile
            if record.executor != executor_id():
                return True  # another process runs it: this record only follows the row
        else:
            self.store.event(record.id, "interrupt_requested", {})
        record.interrupt = True
        if record.session is not None:
            record.session.request_stop()
        return True

    def revive(self, record: TaskRecord, message: str) -> bool:
        """Continue a settled, resident child on its own conversation (``run_epoch`` + 1)."""
        if record.status not in SETTLED or record.residency != Residency.RESIDENT:
            return False
        record.run_epoch += 1
        record.background = True
        record.end_as, record.error, record.final_text = None, None, ""
        # a new run has no executor until one takes it: left naming the earlier run's (gone)
        # executor, the running row would look to a reaper like a crashed one's and end lost
        record.executor = None
        self.store.update(record.id, run_epoch=record.run_epoch, background=1, executor=None)
        self.store.event(record.id, "revived", {"epoch": record.run_epoch})
        self.start(record, message)
        return True

    def evict(self, record: TaskRecord) -> None:
        """Drop a settled child's conversation from memory; continuing it rebuilds it from the
        store (:meth:`kernos.tasks.TaskManager.revive`)."""
        if record.status in ACTIVE:
            return
        self.set_residency(record, Residency.EVICTED)

    def set_residency(self, record: TaskRecord, residency: Residency) -> None:
        """Record ``record``'s residency; its session is dropped from memory (a disposed child
        stays disposed)."""
        if record.residency == residency or record.residency == Residency.DISPOSED:
            return
        record.residency = residency
        record.session = None
        self.store.update(record.id, residency=str(residency))
        self.store.event(record.id, "residency", {"to": str(residency)})

    async def _poll_cancels(self) -> None:
        """Honour ``kernos tasks cancel`` from another process while children are active."""
        while any(r.status in ACTIVE for r in self.records.values()):
            await asyncio.sleep(_CANCEL_POLL_SECONDS)
            # off the loop: the read flushes first, and a flush waits while another process
            # holds the store's write lock (up to its timeout), which must not stall the loop
            # one query for both: cancels (any engine), interrupts (the DBOS engine's runs)
            cancels, interrupts = await asyncio.to_thread(self.store.control_requests)
            for task_id in interrupts:
                record = self.records.get(task_id)
                stoppable = (TaskStatus.RUNNING, TaskStatus.WAITING)
                if record is None or record.status not in stoppable or record.interrupt:
                    continue
                if record.session is not None:
                    record.interrupt = True
                    record.session.request_stop()
            for task_id in cancels:
                record = self.records.get(task_id)
                if record is None or record.status not in ACTIVE:
                    continue
                row = await asyncio.to_thread(self.store.get, task_id)
                if row is not None and row["status"] == TaskStatus.CANCELLED:
                    # another process recorded the end already: stop the run, write nothing
                    record.status = record.end_as = TaskStatus.CANCELLED
                    record.finished_at = row["finished_at"]
                    if record.runner is not None:
                        record.runner.cancel()
                    self.wake()
                    continue
                self.cancel(record, "cancelled from the command line")

    async def aclose(self, *, wait: bool = True) -> None:
        """Finish: wait for every child (``wait``) or abandon the active ones as ``lost``; then
        settled children are ``evicted`` (a later run can continue them), the rest ``disposed``."""
        if wait:
            await self.wait_all()
        else:
            self.abandoning = True
            for record in self.records.values():
                if record.status in ACTIVE:
                    self.abandoned.append(record)
                    record.end_as = TaskStatus.LOST
                    record.error = "abandoned: the parent run ended without waiting (--no-wait)"
                    if record.runner is not None:
                        record.runner.cancel()
            await self.wait_all()
        if self._flush_scheduled:
            self._flush_notices()
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if self._engine is not None:
            await self._engine.aclose()
        for record in self.records.values():
            if record.leave:
                continue  # another executor resumes it: its row is not this process's to end
            # a settled child outlives the run: a later run's task_send rebuilds it from the store
            settled = record.status in SETTLED
            self.set_residency(record, Residency.EVICTED if settled else Residency.DISPOSED)
        self.store.flush()
