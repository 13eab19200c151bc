"""The DBOS task engine: each child run is a DBOS workflow on its model's DBOS queue.

How it works — queues and fair shares, durable steps, grandchildren, replayed transcripts,
follow-ups, orphans, versions, crashes, leaving, and the hand-over between DBOS's loop and the
scheduler's — is written out in docs/architecture.md, "The DBOS engine in detail".

This module imports ``dbos``: it is imported only when the engine is chosen.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import hashlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from dbos import (
    DBOS,
    DBOSClient,
    DBOSConfig,
    DBOSPortableJSONSerializer,
    SetWorkflowID,
    StepOptions,
)
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.wrapper import WrapperModel

from kernos.runtime import LeanModel, Reply, is_postgres_url, usage_responses
from kernos.tasks._approvals import follow_waiting
from kernos.tasks._engine import EngineHost, TaskEngine, crash_mode, model_limit
from kernos.tasks._state import ACTIVE, FINAL, NOTIFY, SETTLED, TaskStatus
from kernos.tasks._steps import ToolRecord, stepped
from kernos.tasks._store import STATUS_CHANNEL, executor_id

if TYPE_CHECKING:
    from kernos.boundary import ToolSpec
    from kernos.tasks._record import TaskRecord
    from kernos.tasks._store import TaskStore

log = logging.getLogger("kernos.tasks")

APP_NAME = "kernos"
#: pinned: DBOS recovers only workflows of the running version; bump it only when the steps of
#: :func:`child_workflow` change in a way old records cannot replay
APP_VERSION = "kernos-tasks-3"  # 2: tool calls became steps; 3: so did a child's task tools
QUEUE_PREFIX = "kernos."
#: how often an executor polls its queues by default (``[tasks] poll``)
POLL_SECONDS = 0.1
#: how often one run of a child is resumed after its executor died: a child that takes down every
#: process it runs on (a tool that exhausts memory, say) ends ``lost`` instead of making its way
#: through the fleet
MAX_RESUMES = 3

ContextItems = list[tuple[contextvars.ContextVar[Any], Any]]
#: how a queued run was admitted: here (the workflow's context, and a future for its end
#: status), or ``None``: by another process
Admission = tuple[ContextItems, "asyncio.Future[str]"] | None
#: runs another process's child here: (task id, first message, epoch, context) → end status
RemoteRun = Callable[[str, str, int, ContextItems], Awaitable[str]]
#: how often the store is read for children other processes run, and heartbeats' reaper; on
#: PostgreSQL as soon as one's status changes (:data:`STATUS_CHANNEL`), at most once per
#: ``FOLLOW_MIN_SECONDS``
FOLLOW_SECONDS = 0.25
FOLLOW_MIN_SECONDS = 0.05
#: a followed child's end: its row and whether this process claimed its notice (``None``: the
#: row is gone)
Ended = tuple[dict[str, Any], bool] | None
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


def queue_name(model_name: str) -> str:
    return QUEUE_PREFIX + model_name


def workflow_id(task_id: str, epoch: int) -> str:
    """The workflow of a task's run: the task id itself for its first run."""
    return task_id if epoch <= 1 else f"{task_id}.{epoch}"


def system_database_url(home: Any, store_url: str | None) -> str:
    """Postgres store: DBOS's tables go in the same database; SQLite: ``HOME/dbos.sqlite``."""
    if store_url and is_postgres_url(store_url):
        return store_url
    return f"sqlite:///{home}/dbos.sqlite"


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


# -- one DBOS per process ------------------------------------------------------------------------
class _Launch:
    """DBOS is a process-wide singleton: launched by the first engine, destroyed by the last."""

    lock = threading.Lock()
    url: str | None = None
    users = 0
    queues: ClassVar[dict[str, int | None]] = {}
    #: the polling interval this process registers its queues with (the first engine's)
    poll = POLL_SECONDS

    @classmethod
    def acquire(
        cls,
        url: str,
        listen: Sequence[str] | None,
        queues: dict[str, int | None],
        shares: dict[str, int | None],
        poll: float = POLL_SECONDS,
    ) -> None:
        """Launch DBOS on ``url`` (or join the running one) and register ``queues`` (name →
        global limit) with each executor's ``shares`` of them (see :func:`queue_shares`),
        polled every ``poll`` seconds (the launching engine's)."""
        with cls.lock:
            if cls.url is not None and cls.url != url:
                # DBOS is one per process: a runtime on another store takes it over (only
                # programs and tests that open several homes in one process get here)
                log.warning("tasks: DBOS moves from %s to %s in this process", cls.url, url)
                cls._stop()
            if cls.url is None:
                cls.poll = poll
                # a process that dequeues nothing (a ``kernos run`` with ``run_executes =
                # false``) registers them once launched, on DBOS's own pool: its queue manager
                # polls none of them, and a client of their own cost it ~0.1 s before DBOS was
                # ready (a connection pool opened and closed)
                early = listen is None or bool(listen)
                if early:
                    _register_queues(url, queues, shares, poll)
                config: DBOSConfig = {
                    "name": APP_NAME,
                    "system_database_url": url,
                    "application_version": APP_VERSION,
                    "executor_id": executor_id(),
                    "serializer": DBOSPortableJSONSerializer(),
                    "log_level": "WARNING",
                    "notification_listener_polling_interval_sec": POLL_SECONDS,
                }
                DBOS(config=config)
                if listen is not None:
                    DBOS.listen_queues(list(listen))
                DBOS.launch()
                cls.url = url
                cls.queues = dict(queues) if early else {}
            cls.users += 1
        try:
            for name, limit in queues.items():
                cls.queue(name, limit, shares.get(name))
        except BaseException:  # this engine does not start: DBOS is not left launched for it
            cls.release()
            raise

    @classmethod
    def release(cls) -> None:
        with cls.lock:
            cls.users -= 1
            if cls.users <= 0 and cls.url is not None:
                cls._stop()

    @classmethod
    def _stop(cls) -> None:
        DBOS.destroy(destroy_registry=False)
        cls.url, cls.users, cls.queues = None, 0, {}

    @classmethod
    def registered(cls, name: str, limit: int | None) -> bool:
        with cls.lock:
            return name in cls.queues and cls.queues[name] == limit

    @classmethod
    def queue(cls, name: str, limit: int | None, share: int | None = None) -> None:
        """Register (or update) one queue after the launch: one new to the database is polled
        from DBOS's queue manager's next scan for new queues (within a second)."""
        with cls.lock:
            if name in cls.queues and cls.queues[name] == limit:
                return
            cls.queues[name] = limit
        DBOS.register_queue(
            name, global_concurrency=limit, worker_concurrency=share,
            polling_interval_sec=cls.poll, on_conflict="always_update",
        )  # fmt: skip


def _register_queues(
    url: str, queues: dict[str, int | None], shares: dict[str, int | None], poll: float
) -> None:
    """Put ``queues`` in the system database before DBOS launches: its queue manager polls the
    queues it finds at launch from the start, and looks for new ones once a second (a first
    run's children would wait for that scan). DBOS registers queues only once launched, so a
    short-lived :class:`~dbos.DBOSClient` does it; on a database without DBOS's tables yet (a
    first run) after ``DBOS.migrate`` made them, which the launch would do anyway."""
    if not queues:
        return
    try:
        _register_with_client(url, queues, shares, poll)
    except Exception:  # no tables yet (or the database is unreachable: the migration says so)
        DBOS.migrate(url)
        _register_with_client(url, queues, shares, poll)


def _register_with_client(
    url: str, queues: dict[str, int | None], shares: dict[str, int | None], poll: float
) -> None:
    client = DBOSClient(
        system_database_url=url, application_name=APP_NAME, system_database_pool_size=1,
        serializer=DBOSPortableJSONSerializer(), retry_connection_errors=False,
    )  # fmt: skip
    try:
        for name, limit in queues.items():
            client.register_queue(
                name, global_concurrency=limit, worker_concurrency=shares.get(name),
                polling_interval_sec=poll, on_conflict="always_update",
            )  # fmt: skip
    finally:
        client.destroy()


def fair_share(limit: int | None, servers: int) -> int | None:
    """Each executor's share of a queue's global ``limit`` when ``servers`` live executors serve
    it: the limit divided among them, rounded up (the shares add up to at least the limit, and
    the global limit still holds across them); ``None``, no cap of its own, for an unbounded
    queue or a lone executor, which may use the whole limit."""
    if limit is None or limit <= 0 or servers <= 1:
        return None
    return -(-limit // servers)


def queue_shares(
    limits: dict[str, int | None], serving: Sequence[Sequence[str] | None]
) -> dict[str, int | None]:
    """:func:`fair_share` of each queue (name → global limit), given the queues each live
    executor serves (``None``: every queue)."""
    return {
        name: fair_share(limit, sum(1 for queues in serving if queues is None or name in queues))
        for name, limit in limits.items()
    }


def _set_shares(serving: Sequence[Sequence[str] | None], spread: bool) -> dict[str, int | None]:
    """Write each kernos queue's per-executor limit (DBOS's ``worker_concurrency``, kept in
    the queue's row, which every executor's queue thread reads before each poll): its share
    among ``serving``, or none (``spread`` off). The queues whose limit changed."""
    changed: dict[str, int | None] = {}
    for queue in DBOS.list_queues():
        if not queue.name.startswith(QUEUE_PREFIX):
            continue
        try:
            limit = queue.global_concurrency
            want = queue_shares({queue.name: limit}, serving)[queue.name] if spread else None
            if queue.worker_concurrency != want:
                queue.set_worker_concurrency(want)
                changed[queue.name] = want
        except Exception as exc:  # its limit changed meanwhile, say: the next beat sets it
            log.info("tasks: could not set the share of queue %s: %s", queue.name, exc)
    return changed


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


#: the engines of this process, which the workflow body hands each run to
_ENGINES: list[DBOSEngine] = []
#: engines of this process whose DBOS launched (or is launching) but that are not in
#: :data:`_ENGINES` yet: a workflow DBOS dequeues meanwhile waits for them
_BOOTING: list[DBOSEngine] = []
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


def _fresh_default_executor() -> None:
    """DBOS makes its thread pool the running loop's default executor (``asyncio.to_thread``);
    once DBOS is destroyed that pool is shut down, so a loop that goes on (a later manager in
    the same ``asyncio.run``) gets a fresh pool of its own."""
    if _Launch.url is None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio")
        )


# -- model requests as steps ---------------------------------------------------------------------
class DurableModel(WrapperModel):
    """A child's model whose answers are DBOS steps inside a child workflow (plain answers
    outside one): the loop wraps the view of what it wraps in :class:`DurableLean` (see
    :func:`kernos.runtime._lean.lean_model_for`)."""

    def wrap_lean(self, inner: LeanModel) -> LeanModel:
        return DurableLean(inner)


def _reply_record(reply: Reply) -> str:
    """An answer as a step's record: a pydantic-ai response (the raw finish reason where
    pydantic-ai keeps it), the form the pydantic-ai engine of earlier kernos versions recorded
    too, so a run they began resumes here."""
    (response,) = usage_responses([reply])
    if reply.finish_reason:
        response.provider_details = {"finish_reason": reply.finish_reason}
    return ModelMessagesTypeAdapter.dump_json([response]).decode()


def _record_reply(raw: str) -> Reply:
    """A step's record (this version's or an earlier pydantic-ai engine's) as an answer; tool
    arguments as the model sent them."""
    (response,) = ModelMessagesTypeAdapter.validate_json(raw)
    assert isinstance(response, ModelResponse)
    calls = [
        (p.tool_call_id, p.tool_name, p.args if isinstance(p.args, str) else p.args_as_json_str())
        for p in response.parts
        if isinstance(p, ToolCallPart)
    ]
    usage = response.usage
    details = response.provider_details or {}
    return Reply(
        text="".join(p.content for p in response.parts if isinstance(p, TextPart)),
        calls=calls,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cache_read_tokens,
        model_name=response.model_name,
        provider_name=response.provider_name,
        finish_reason=details.get("finish_reason"),
    )


class DurableLean:
    """A lean model whose answers are DBOS steps inside a child workflow (plain answers
    outside one): run once and recorded, the recorded answer on a replay."""

    def __init__(self, inner: LeanModel) -> None:
        self.inner = inner

    def tool_wire(self, spec: ToolSpec[Any]) -> dict[str, Any]:
        return self.inner.tool_wire(spec)

    async def answer(
        self,
        messages: list[dict[str, Any]],
        tools: str,
        on_delta: Callable[[str], None] | None,
    ) -> Reply:
        if DBOS.workflow_id is None:
            return await self.inner.answer(messages, tools, on_delta)

        async def model_request() -> str:
            return _reply_record(await self.inner.answer(messages, tools, on_delta))

        options: StepOptions = {"name": "model_request", "retries_allowed": False}
        return _record_reply(await DBOS.run_step_async(options, model_request))


async def tool_step(name: str, call: Callable[[], Coroutine[Any, Any, ToolRecord]]) -> ToolRecord:
    """One tool call as a DBOS step of the current child workflow (a plain call outside one):
    run once and recorded, its recorded result on a replay."""
    if DBOS.workflow_id is None:
        return await call()
    options: StepOptions = {"name": f"tool:{name}", "retries_allowed": False}
    return await DBOS.run_step_async(options, call)


# -- the engine ----------------------------------------------------------------------------------
class DBOSEngine(TaskEngine):
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

    # -- launching --------------------------------------------------------------------------
    def _queues(self) -> dict[str, int | None]:
        """Every model this config names, and the one children without a model of their own
        run on (``--model``, ``KERNOS_MODEL``), with its limit (``None``: unbounded)."""
        from kernos.runtime import NoModelError

        config = self.scheduler.config
        names = set(config.models) | {config.default_model}
        names |= {c.model for c in config.categories.values()}
        names |= {a.model for a in config.agents.values()}
        with contextlib.suppress(NoModelError):
            names.add(self.scheduler.runtime.model_name(""))
        return {
            queue_name(n): model_limit(config, n) or None for n in sorted(x for x in names if x)
        }

    def _acquire(self) -> None:
        try:
            queues = self._queues()
            poll = self.scheduler.config.tasks.poll
            _Launch.acquire(self.url, self.listen, queues, self._shares(queues), poll)
        except BaseException as exc:
            self._boot_error = exc

    def _shares(self, queues: dict[str, int | None]) -> dict[str, int | None]:
        """Each of ``queues``' shares (:func:`queue_shares`) among the live executors, with this
        one if it executes (it has not beaten yet), for registering them: the queue's row is
        every executor's, so a process that registered its queues without them (``kernos
        run`` too, executing or not) would lift every executor's share, and a joining
        executor's share holds from its first poll."""
        if not self.spread:
            return {}
        try:
            serving = self.scheduler.store.serving(self.heartbeat * 3)
        except Exception as exc:  # the reaper's next beat sets them
            log.info("tasks: could not read the executors to share the queues: %s", exc)
            return {}
        serving.pop(self.executor, None)
        mine = [self.listen] if self.listen != [] else []
        return queue_shares(queues, [*serving.values(), *mine])

    async def _spread(self) -> None:
        """Split each queue's limit among the live executors that serve it (``[tasks]
        spread``): recomputed every beat by the reaper, so a share grows once an executor
        retired or went silent for three beats, and shrinks as one joins."""
        serving = await asyncio.to_thread(self.scheduler.store.serving, self.heartbeat * 3)
        changed = await asyncio.to_thread(_set_shares, list(serving.values()), self.spread)
        if changed:
            servers = len(serving)
            log.info("tasks: per-executor limits among %d executor(s): %s", servers, changed)

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
    def owns(self, task_id: str, epoch: int) -> bool:
        return workflow_id(task_id, epoch) in self._admissions

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

    # -- children other processes run ------------------------------------------------------
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
