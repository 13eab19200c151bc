"""The task engine port: how a child is admitted under its model's limit and run.

:class:`TaskEngine` is the one narrow seam between the scheduler (records, transitions, notices)
and what runs children. Two engines implement it:

- :class:`LocalEngine` (the embedded default): per-model slots in this process, each child an
  asyncio task of this process.
- :class:`kernos.tasks._dbos.DBOSEngine`: each child a DBOS workflow on a per-model DBOS queue
  whose limit holds across every process sharing the store (``kernos worker``), model requests and
  tool calls as durable steps. Chosen by ``[tasks] engine = "dbos"`` or a Postgres store.

Both keep ``record.runner`` an asyncio task of the scheduler's loop that ends when the child's run
ended, so waiting and cancelling (``record.runner.cancel()``) are the scheduler's, whatever runs.
"""

from __future__ import annotations

import asyncio
import os
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from kernos.runtime import is_postgres_url
from kernos.tasks._state import SETTLED, TaskStatus
from kernos.tasks._store import executor_id

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from kernos.boundary import ToolSpec
    from kernos.runtime import Config, Runtime, StoredRequest
    from kernos.tasks._record import TaskRecord
    from kernos.tasks._store import TaskStore

#: overrides ``[tasks] engine`` (the test suite runs once per engine with it)
ENGINE_ENV = "KERNOS_TASK_ENGINE"


class EngineHost(Protocol):
    """What an engine holds: the scheduler as the engines see it (the ``TaskScheduler`` a
    ``TaskManager`` holds), its records, store and public moves, notices and wake-ups.
    Declared here, below the scheduler, so an engine never imports the scheduler's module."""

    runtime: Runtime
    config: Config
    store: TaskStore
    records: dict[str, TaskRecord]
    #: closing without waiting began: no new child starts here
    abandoning: bool

    def mark_running(self, record: TaskRecord) -> None:
        """The engine admitted ``record``: its run starts now."""

    async def run_child(self, record: TaskRecord, text: str) -> None:
        """One admitted run of ``record``'s session, to its end state."""

    def move(
        self,
        record: TaskRecord,
        target: TaskStatus,
        why: str | None = None,
        code: str | None = None,
    ) -> bool:
        """Apply one status transition (``False``: none, or one the table forbids)."""

    def notify(self, record: TaskRecord) -> None:
        """Deliver ``record``'s completion notice to its parent."""

    def wake(self) -> None:
        """Wake whoever waits for a change."""

    def tell_parent(self, record: TaskRecord, text: str) -> None:
        """Queue ``text`` for ``record``'s parent, delivered with this loop turn's notices."""

    def waiting(self, record: TaskRecord, request: StoredRequest) -> None:
        """``record``'s run waits on the approval request ``request``."""

    def resumed(self, record: TaskRecord, request: StoredRequest) -> None:
        """The request ``record`` waited on was answered (or timed out): it runs again."""

    def watch_cancels(self) -> None:
        """Poll the store for cancels from other processes while children are active."""

    def rebuild(self, row: dict[str, Any], epoch: int) -> TaskRecord | None:
        """A child another process spawned, rebuilt from its row (``None``: not here)."""


class TaskEngine(ABC):
    """Admits and runs children for one scheduler (an :class:`EngineHost`).

    Every member the scheduler, the manager and the task tools use is declared here; what
    only a durable engine does has a default that says "not durable" (no probing for optional
    members), as pydantic-ai's ``toolsets/abstract.py`` gives each optional capability one.
    """

    #: what ``kernos tasks`` and the task's events call this engine
    name: ClassVar[str]
    #: a run may be replayed (resumed after a crash): the scheduler keys its events and turns,
    #: and sends, notices and interrupts go through the store
    replays: ClassVar[bool] = False

    def __init__(self, scheduler: EngineHost) -> None:
        self.scheduler = scheduler

    @abstractmethod
    def start(self, record: TaskRecord, text: str) -> None:
        """Start (or queue) ``record``'s next run with ``text`` as its message; sets
        ``record.runner``. A child admitted at once is ``running`` on return."""

    @abstractmethod
    def queue_position(self, record: TaskRecord) -> int | None:
        """1-based place of a pending child in its model's queue (``None``: not queued)."""

    def child_model(self, model: Model) -> Model:
        """The model a child session runs on (the DBOS engine makes its requests steps)."""
        return model

    def child_tools(self, tools: Sequence[ToolSpec[Any]]) -> list[ToolSpec[Any]]:
        """The tools a child session gets (the DBOS engine makes each call a step)."""
        return list(tools)

    async def queued(self, records: Sequence[TaskRecord]) -> None:
        """Return once the engine holds ``records`` durably (at once: nothing to wait for)."""
        return None

    def adopt(self, record: TaskRecord) -> None:
        """Follow an active child a rebuilt child's earlier attempt spawned until its run ends
        (nothing here: only a durable engine rebuilds children)."""
        return None

    def spawn_ids(self, count: int, salt: int = 0) -> list[str] | None:
        """The ids a ``task`` call gives its ``count`` children, the same on every replay of
        the call (``None``: fresh random ids)."""
        return None

    def send_key(self) -> str | None:
        """The key a ``task_send`` made now is stored under, the same on every replay of its
        step (``None``: every send is stored)."""
        return None

    @property
    def leaving(self) -> bool:
        """This process runs no new child and leaves the active ones to other executors."""
        return False

    async def aclose(self) -> None:
        """Release what the engine holds (every run has ended already)."""
        return None


def model_limit(config: Config, model_name: str) -> int:
    """A model's concurrency limit (``0``: unbounded): its alias's, else ``[tasks]``'s."""
    alias = config.models.get(model_name)
    if alias is not None and alias.concurrency is not None:
        return alias.concurrency
    return config.tasks.concurrency


def engine_name(config: Config, store_url: str | None = None) -> str:
    """Which engine a runtime uses: ``KERNOS_TASK_ENGINE``, else ``[tasks] engine``, where
    ``auto`` means ``dbos`` on a Postgres store and ``local`` otherwise."""
    chosen = os.environ.get(ENGINE_ENV, "").strip().lower() or config.tasks.engine
    if chosen == "auto":
        return "dbos" if _postgres(store_url) else "local"
    if chosen not in ("local", "dbos"):
        from kernos.runtime import ConfigError

        raise ConfigError(
            "environment", ENGINE_ENV, f"{chosen!r} is not a task engine", "use local or dbos"
        )
    return chosen


def _postgres(store_url: str | None) -> bool:
    return is_postgres_url(store_url or os.environ.get("KERNOS_STORE_URL", ""))


def crash_mode(config: Config, store_url: str | None = None) -> str:
    """``[tasks] on_crash``: ``auto`` is ``resume`` on a Postgres store, ``lost`` otherwise."""
    mode = config.tasks.on_crash
    if mode == "auto":
        return "resume" if _postgres(store_url) else "lost"
    return mode


class _Slots:
    """A per-model concurrency limit with a FIFO queue (``limit == 0``: unbounded)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self.waiting: deque[tuple[TaskRecord, asyncio.Future[None]]] = deque()

    def free(self) -> bool:
        return self.limit == 0 or (self.active < self.limit and not self.waiting)

    def position(self, record: TaskRecord) -> int | None:
        for index, (waiting, _) in enumerate(self.waiting, start=1):
            if waiting is record:
                return index
        return None

    def reserve(self, record: TaskRecord) -> asyncio.Future[None] | None:
        """Take a free slot now (``None``) or join the queue (a future resolved with the slot)."""
        if self.free():
            self.active += 1
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append((record, future))
        return future

    async def wait(self, record: TaskRecord, future: asyncio.Future[None]) -> None:
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # the slot was handed over just as we were cancelled
            else:
                self.waiting = deque(w for w in self.waiting if w[0] is not record)
            raise

    def release(self) -> None:
        while self.waiting:
            _, future = self.waiting.popleft()
            if not future.done():
                future.set_result(None)  # hand the slot over; ``active`` stays the same
                return
        self.active -= 1


class LocalEngine(TaskEngine):
    """Children as asyncio tasks of this process, under per-model slots (the default)."""

    name = "local"

    def __init__(self, scheduler: EngineHost) -> None:
        super().__init__(scheduler)
        self._slots: dict[str, _Slots] = {}

    def _slots_for(self, model_name: str) -> _Slots:
        slots = self._slots.get(model_name)
        if slots is None:
            slots = self._slots[model_name] = _Slots(model_limit(self.scheduler.config, model_name))
        return slots

    def queue_position(self, record: TaskRecord) -> int | None:
        return self._slots_for(record.model_name).position(record)

    def start(self, record: TaskRecord, text: str) -> None:
        # a free slot is taken now, so the caller already sees the child running
        queued = self._slots_for(record.model_name).reserve(record)
        if queued is None:
            # this process runs it: the running row names it in the same write
            record.executor = executor_id()
            self.scheduler.mark_running(record)
        elif record.status in SETTLED:
            self.scheduler.move(record, TaskStatus.PENDING)
        record.runner = asyncio.get_running_loop().create_task(
            self._run(record, text, queued), name=f"kernos-task-{record.id}"
        )

    async def _run(
        self, record: TaskRecord, text: str, queued: asyncio.Future[None] | None
    ) -> None:
        slots = self._slots_for(record.model_name)
        if queued is not None:
            try:
                await slots.wait(record, queued)
            except asyncio.CancelledError:
                self.scheduler.move(record, record.end_as or TaskStatus.CANCELLED)
                return
        try:
            await self.scheduler.run_child(record, text)
        finally:
            slots.release()
