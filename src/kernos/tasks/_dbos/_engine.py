"""The DBOS task engine: its state, the engine port, the launch awaited, and one run."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dbos import DBOS, SetWorkflowID
from pydantic_ai.models import Model

from kernos.tasks._dbos._base import Admission, Ended, RemoteRun
from kernos.tasks._dbos._follow import _Following
from kernos.tasks._dbos._launch import (
    _fresh_default_executor,
    _Launch,
    _Launching,
    queue_name,
    system_database_url,
    workflow_id,
)
from kernos.tasks._dbos._recovery import _Recovery
from kernos.tasks._dbos._shares import _Sharing
from kernos.tasks._dbos._steps import DurableModel, tool_step
from kernos.tasks._dbos._workflow import (
    _BOOTING,
    _ENGINES,
    _HandOver,
    child_workflow,
    outside_workflows,
)
from kernos.tasks._engine import EngineHost, crash_mode, model_limit
from kernos.tasks._state import SETTLED, TaskStatus
from kernos.tasks._steps import stepped
from kernos.tasks._store import executor_id

if TYPE_CHECKING:
    from kernos.boundary import ToolSpec
    from kernos.tasks._record import TaskRecord

log = logging.getLogger("kernos.tasks")


class _Steps:
    """The seconds each named step of a sequence took (``delete 0.01s, release 0.20s``)."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.parts: list[str] = []

    def took(self, name: str) -> None:
        now = time.monotonic()
        self.parts.append(f"{name} {now - self.last:.2f}s")
        self.last = now

    def __str__(self) -> str:
        return ", ".join(self.parts)


class DBOSEngine(_HandOver, _Following, _Recovery, _Sharing, _Launching):
    """Children as DBOS workflows on per-model DBOS queues.

    Args:
        scheduler: the scheduler whose records this engine runs.
        listen: the queues this process executes (``None``: all; ``[]``: none, only workers do).
        remote: builds and runs children spawned by other processes (``kernos worker``, and
            ``kernos run`` unless ``[tasks] run_executes = false``); ``None``: only this
            process's own children.
        worker: this process is ``kernos worker``: it executes whatever ``run_executes`` says.
    """

    name = "dbos"
    #: a run may be replayed (resumed after a crash): the scheduler keys its events and turns
    replays = True

    def __init__(
        self,
        scheduler: EngineHost,
        *,
        listen: Sequence[str] | None = None,
        remote: RemoteRun | None = None,
        worker: bool = False,
    ) -> None:
        super().__init__(scheduler)
        runtime = scheduler.runtime
        self.url = system_database_url(runtime.home, runtime.config.store_url)
        executes = worker or scheduler.config.tasks.run_executes
        if listen is None and not executes:
            listen = []  # only workers run children
        self.listen = listen
        self.remote = remote if remote is not None else (self.run_remote if executes else None)
        self.on_crash = crash_mode(scheduler.config, runtime.config.store_url)
        self.heartbeat = scheduler.config.tasks.heartbeat
        self.spread = scheduler.config.tasks.spread
        self._beats: asyncio.Task[None] | None = None
        #: set once the first beat is over (as the reaper: its sharing and reaping too)
        self.beaten = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self.executor = executor_id()
        #: told when this process takes another process's child (``"took"``) and when that
        #: child's run here ends (``"ended"``), with the record (``kernos worker``'s lines)
        self.on_child: Callable[[str, TaskRecord], None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._launched = False
        self._launching: asyncio.Lock | None = None
        self._boot_error: BaseException | None = None
        # DBOS launches in the background from the start, so the first child does not wait
        self._boot = threading.Thread(target=self._acquire, name="kernos-dbos-launch", daemon=True)
        _BOOTING.append(self)
        self._boot.start()
        self._admissions: dict[str, asyncio.Future[Admission]] = {}
        self._order: list[TaskRecord] = []  # pending beyond the limit, in spawn order
        self._live: set[TaskRecord] = set()  # started and not yet ended
        #: children other processes run, by task id: the record, and once its run ended, its
        #: row and whether this process claimed its notice
        self._followed: dict[str, tuple[TaskRecord, asyncio.Future[Ended]]] = {}
        #: children handed to this process to run, waiting for the next take (by task id)
        self._to_take: dict[str, list[asyncio.Future[dict[str, Any] | None]]] = {}
        self._taker: asyncio.Task[None] | None = None
        #: set to have :meth:`_watch` read the store now (a status change was announced)
        self._heard: asyncio.Event | None = None
        self._finished: list[str] = []
        self.stopping = False  # :meth:`leave` was called: no new child starts here
        #: the workflows this process queued whose admission it still waits for
        self._enqueued: set[str] = set()
        #: the children started here whose workflows are being queued (see :meth:`queued`)
        self._queueing: dict[str, asyncio.Future[None]] = {}
        #: workflows of waited-on children seen gone or ended, by workflow id: since when
        self._orphans: dict[str, float] = {}
        self._orphan_check = 0.0  # when the follower last asked DBOS (monotonic)
        #: the reaper's :attr:`_orphans`: every active child's workflow seen gone or ended
        self._swept: dict[str, float] = {}
        self.orphan_checks = 0  # how many times it asked (tests wait on it)
        #: registers this engine once DBOS launched (:meth:`ready`), made in a running loop:
        #: DBOS polls the queues from its launch, and a process that executes other
        #: processes' children (``run_executes``) runs them before it spawns any of its own
        self._serving: asyncio.Task[None] | None = None
        with contextlib.suppress(RuntimeError):  # no loop yet: the first spawn registers it
            self._serving = asyncio.get_running_loop().create_task(self._serve())

    # -- the port ---------------------------------------------------------------------------
    def start(self, record: TaskRecord, text: str) -> None:
        limit = model_limit(self.scheduler.config, record.model_name)
        busy = sum(1 for r in self._live if r.model_name == record.model_name)
        if limit == 0 or busy < limit:
            # a free place in this process's share: DBOS dequeues it within a poll, so the
            # caller sees it running as under the local engine
            self.scheduler.mark_running(record)
        else:
            if record.status in SETTLED:
                self.scheduler.move(record, TaskStatus.PENDING)
            self._order.append(record)
        self._live.add(record)
        self.loop = asyncio.get_running_loop()
        self._queueing[record.id] = self.loop.create_future()
        record.runner = self.loop.create_task(
            self._run(record, text), name=f"kernos-task-{record.id}", context=outside_workflows()
        )

    async def queued(self, records: Sequence[TaskRecord]) -> None:
        """Inside a child's step (a ``task`` call of a durable run), wait until each of
        ``records`` is on its queue, or its queueing failed: the step is recorded once the call
        returns, and a replay does not spawn again, so a child whose workflow was not queued
        yet when its spawner's executor died would never run (the reaper ends it ``lost``).
        Elsewhere it returns at once: the spawner itself queues what it spawned."""
        if DBOS.workflow_id is None:
            return
        waits = [self._queueing[r.id] for r in records if r.id in self._queueing]
        if waits:
            await asyncio.wait([asyncio.shield(w) for w in waits])

    def adopt(self, record: TaskRecord) -> None:
        """Follow an active child of a rebuilt child (a grandchild its earlier attempt spawned,
        run here or elsewhere) until its run ends, as for any child another process runs."""
        self.loop = asyncio.get_running_loop()
        record.runner = self.loop.create_task(
            self._follow(record), name=f"kernos-task-{record.id}", context=outside_workflows()
        )

    def spawn_ids(self, count: int, salt: int = 0) -> list[str] | None:
        """The ids of the ``count`` children a ``task`` call of a durable run spawns: the same
        on every replay of the call (its workflow and step), so a call in flight at a crash,
        run again, finds the children it created (``None`` outside a step of a workflow: fresh
        random ids). ``salt``: the next candidates, when one is another task's id."""
        wf_id, step = DBOS.workflow_id, DBOS.step_id
        if wf_id is None or step is None:
            return None
        return [
            "t_" + hashlib.sha256(f"{wf_id}:{step}:{n}:{salt}".encode()).hexdigest()[:8]
            for n in range(count)
        ]

    def send_key(self) -> str | None:
        """The key of a ``task_send`` that a durable run makes now (:meth:`TaskStore.send`):
        its step's workflow and step id, the same on every replay of the step, so a send whose
        message committed before a crash, run again by the resumed run, is not stored twice
        (``None`` outside a step of a workflow: every send is stored)."""
        wf_id, step = DBOS.workflow_id, DBOS.step_id
        if wf_id is None or step is None:
            return None
        return f"{wf_id}:{step}"

    def queue_position(self, record: TaskRecord) -> int | None:
        waiting = [r for r in self._order if r.model_name == record.model_name]
        return waiting.index(record) + 1 if record in waiting else None

    async def _serve(self) -> None:
        try:
            await self.ready()
        except Exception as exc:  # said again by the first spawn's ready()
            log.warning("tasks: the DBOS engine could not start: %s", exc)

    async def aclose(self) -> None:
        if self._serving is not None:
            await asyncio.gather(self._serving, return_exceptions=True)
        # every run ended: a child DBOS hands over from now on is left unrun, for the crash
        # rule, not run and cut short by the release
        self.stopping = True
        if not self._launched:
            await asyncio.to_thread(self._boot.join)
            if self in _BOOTING:
                _BOOTING.remove(self)
            if self._boot_error is None:
                await asyncio.to_thread(_Launch.release)
                _fresh_default_executor()
            return
        done, self._finished = self._finished, []
        steps = _Steps()  # how long each part of the close took, in the log
        try:
            await self._recorded(done)
            if done:
                await DBOS.delete_workflows_async(done)
        except Exception as exc:  # the records stay; nothing else depends on them
            log.warning("tasks: could not delete %d finished workflow(s): %s", len(done), exc)
        steps.took("delete")
        for task in (self._beats, self._watcher):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        steps.took("stop")
        try:
            self.scheduler.store.retire(self.executor)
        except Exception as exc:
            log.warning("tasks: could not retire executor %s: %s", self.executor, exc)
        steps.took("retire")
        self._launched = False
        await asyncio.to_thread(_Launch.release)
        steps.took("release")
        if self in _ENGINES:  # after the release: until then DBOS may hand it a child
            _ENGINES.remove(self)
        _fresh_default_executor()
        log.info("tasks: DBOS engine of executor %s closed (%s)", self.executor, steps)

    def child_model(self, model: Model) -> Model:
        return DurableModel(model)

    def child_tools(self, tools: Sequence[ToolSpec[Any]]) -> list[ToolSpec[Any]]:
        return [stepped(spec, tool_step) for spec in tools]

    async def ready(
        self, model_name: str | None = None, enqueue: tuple[str, TaskRecord, str] | None = None
    ) -> None:
        """Wait for DBOS's launch (once per engine), register ``model_name``'s queue and queue
        ``enqueue`` (workflow id, record, first message).

        Raises:
            Exception: DBOS could not launch on the system database.
        """
        if self._launching is None:
            self._launching = asyncio.Lock()
        async with self._launching:
            if not self._launched:
                self.loop = asyncio.get_running_loop()
                await asyncio.to_thread(self._boot.join)
                if self._boot_error is not None:
                    raise self._boot_error
                self._launched = True
                _ENGINES.append(self)
                if self in _BOOTING:
                    _BOOTING.remove(self)
                self._beats = self.loop.create_task(self._beat_and_reap())
                self._watcher = self.loop.create_task(self._watch())
            if model_name is not None:
                limit = model_limit(self.scheduler.config, model_name) or None
                name = queue_name(model_name)
                if not _Launch.registered(name, limit):
                    share = await asyncio.to_thread(self._shares, {name: limit})
                    await asyncio.to_thread(_Launch.queue, name, limit, share.get(name))
            if enqueue is not None:  # under the lock: queued in spawn order (FIFO)
                wf_id, record, text = enqueue
                with SetWorkflowID(wf_id):
                    await DBOS.enqueue_workflow_async(
                        queue_name(record.model_name), child_workflow, record.id, text,
                        record.run_epoch,
                    )  # fmt: skip

    # -- one run ----------------------------------------------------------------------------
    async def _run(self, record: TaskRecord, text: str) -> None:
        assert self.loop is not None
        wf_id = workflow_id(record.id, record.run_epoch)
        admitted: asyncio.Future[Admission]
        admitted = self.loop.create_future()
        self._admissions[wf_id] = admitted

        async def queue() -> None:
            try:
                # the row first: a worker handed the workflow rebuilds the child from it (not
                # committed yet, it would find nothing to take and the child would never run)
                await self.scheduler.store.store.flushed()
                await self.ready(record.model_name, enqueue=(wf_id, record, text))
                self._enqueued.add(wf_id)  # from now on its workflow exists: the follower checks it
            finally:
                waiting = self._queueing.pop(record.id, None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(None)

        # shielded: a run leaving (--no-wait) while the child is being queued still queues it
        queued = asyncio.ensure_future(queue())
        try:
            try:
                await asyncio.shield(queued)
                admission = await admitted
                if admission is None:  # another process took it: follow it in the store
                    self._admissions.pop(wf_id, None)
                    await self._follow(record)
                    return
                items, done = admission
            except asyncio.CancelledError:
                # stopped while it was being queued: the queueing ends first, else the child
                # would be pending in the store and in no queue (a --no-wait run's child)
                await asyncio.wait({queued})
                if queued.exception() is not None:
                    record.end_as = None
                    record.error = (
                        f"the task engine could not queue the child: {queued.exception()}"
                    )
                    self.scheduler.move(record, TaskStatus.ERROR)
                    return
                # handed over here just now (its workflow waits in _admit), its run not started
                here = admitted.result() if admitted.done() and not admitted.cancelled() else None
                if here is not None:
                    self._live.discard(record)
                if record.end_as == TaskStatus.LOST or record.leave:
                    # the run ends without waiting (--no-wait): a child still queued, or running
                    # in another process, is left to the executors; it is not lost; nor is one
                    # handed over here whose run did not start (see _admit). So is a worker's
                    # own child (a grandchild its child spawned) as the worker leaves: the
                    # child, resumed elsewhere, takes it in
                    if here is not None:
                        here[1].cancel()
                    log.info("task %s left to the other executors", record.id)
                    record.end_as = None
                    return
                if record.executor in (None, self.executor):
                    await asyncio.shield(self._cancel_workflow(wf_id))
                # else another executor runs it: the cancelled row is what stops it there (its
                # cancel poll), and it records the workflow's end itself
                self.scheduler.move(record, record.end_as or TaskStatus.CANCELLED)
                if here is not None:
                    here[1].set_result(str(record.status))  # its workflow ends too
                return
            except Exception as exc:  # the system database refused the workflow
                record.error = f"the task engine could not queue the child: {exc}"
                self.scheduler.move(record, TaskStatus.ERROR)
                return
        finally:
            self._admissions.pop(wf_id, None)
            self._enqueued.discard(wf_id)
            if record in self._order:
                self._order.remove(record)
            if not admitted.done() or admitted.cancelled() or admitted.exception():
                self._live.discard(record)
        for var, value in items:  # the workflow's DBOS context: model requests become its steps
            var.set(value)
        try:
            await self.scheduler.run_child(record, text)
        finally:
            self._live.discard(record)
            if not done.done():
                done.set_result(str(record.status))
            self._finished.append(wf_id)
