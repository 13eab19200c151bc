"""What the parts of :class:`~kernos.tasks._dbos._engine.DBOSEngine` share: one mixin per seam
(launch, fair shares, hand-over, following, recovery), each a :class:`EngineBase`, which
declares the engine's state (set in its ``__init__``) and the methods one part calls of
another."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from kernos.tasks._engine import TaskEngine

if TYPE_CHECKING:
    from kernos.tasks._record import TaskRecord


ContextItems = list[tuple[contextvars.ContextVar[Any], Any]]
#: how a queued run was admitted: here (the workflow's context, and a future for its end
#: status), or ``None``: by another process
Admission = tuple[ContextItems, "asyncio.Future[str]"] | None
#: runs another process's child here: (task id, first message, epoch, context) → end status
RemoteRun = Callable[[str, str, int, ContextItems], Awaitable[str]]
#: a followed child's end: its row and whether this process claimed its notice (``None``: the
#: row is gone)
Ended = tuple[dict[str, Any], bool] | None


class EngineBase(TaskEngine):
    """The DBOS engine's state and the methods its parts call of one another (see
    :class:`~kernos.tasks._dbos._engine.DBOSEngine`, whose ``__init__`` sets each)."""

    url: str
    listen: Sequence[str] | None
    remote: RemoteRun | None
    on_crash: str
    heartbeat: float
    spread: bool
    executor: str
    on_child: Callable[[str, TaskRecord], None] | None
    loop: asyncio.AbstractEventLoop | None
    stopping: bool
    orphan_checks: int
    _beats: asyncio.Task[None] | None
    beaten: asyncio.Event
    _watcher: asyncio.Task[None] | None
    _launched: bool
    _launching: asyncio.Lock | None
    _boot_error: BaseException | None
    _boot: threading.Thread
    _admissions: dict[str, asyncio.Future[Admission]]
    _order: list[TaskRecord]
    _live: set[TaskRecord]
    _followed: dict[str, tuple[TaskRecord, asyncio.Future[Ended]]]
    _to_take: dict[str, list[asyncio.Future[dict[str, Any] | None]]]
    _taker: asyncio.Task[None] | None
    _heard: asyncio.Event | None
    _finished: list[str]
    _enqueued: set[str]
    _queueing: dict[str, asyncio.Future[None]]
    _orphans: dict[str, float]
    _orphan_check: float
    _swept: dict[str, float]
    _serving: asyncio.Task[None] | None

    if TYPE_CHECKING:  # each defined by one part; declared here for the others

        async def ready(
            self,
            model_name: str | None = None,
            enqueue: tuple[str, TaskRecord, str] | None = None,
        ) -> None: ...
        async def run_remote(
            self, task_id: str, text: str, epoch: int, items: ContextItems
        ) -> str: ...
        async def _follow(self, record: TaskRecord) -> None: ...
        async def _cancel_workflow(self, wf_id: str) -> None: ...
        async def _sweep(self) -> None: ...
        async def _spread(self) -> None: ...
        def _shares(self, queues: dict[str, int | None]) -> dict[str, int | None]: ...
