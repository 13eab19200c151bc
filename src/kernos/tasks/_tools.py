"""The model-facing tools ``task``, ``task_send``, ``task_output`` and ``task_cancel``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from kernos.boundary import ToolContext, ToolError, ToolResult, ToolSpec, identifier, non_blank_text
from kernos.tasks._normalize import normalize_task_arguments
from kernos.tasks._prompts import prompt_text
from kernos.tasks._record import compaction_note
from kernos.tasks._resolve import SpawnResolution, TaskArgs, clip_shown, task_json_schema
from kernos.tasks._state import ACTIVE, SETTLED, Residency, TaskStatus

if TYPE_CHECKING:
    from kernos.runtime import Config, Session
    from kernos.tasks._engine import TaskEngine
    from kernos.tasks._record import TaskRecord
    from kernos.tasks._store import TaskStore

#: ``ToolContext.extras`` key: how many seconds a foreground ``task`` may wait for its children
#: before it answers that they are still running (``kernos mcp --foreground-wait``); absent: no
#: limit.
FOREGROUND_WAIT = "foreground_wait"

#: ``task_output(mode="full")`` shows at most this many characters of a transcript.
FULL_OUTPUT_CAP = 20_000
#: how long ``task_send`` waits for a child whose run ended in another process as the message
#: came to end here too (its follower reads the store every 0.25 s), before continuing it
_ENDED_SECONDS = 5.0

_JSON_SCHEMA = task_json_schema()


class TaskHost(Protocol):
    """What the task tools use of the manager that binds them (``TaskManager``), declared
    here so the tools do not import the manager that imports them."""

    config: Config
    store: TaskStore
    #: the ``task`` tool's description (its agents and categories)
    description: str
    #: a background child's result reaches its parent (``False``: ``kernos run --no-wait``)
    delivers_results: bool

    @property
    def engine(self) -> TaskEngine: ...

    def resolve(self, params: Any, session: Session) -> SpawnResolution: ...

    def check_spawn(self, session: Session, resolution: SpawnResolution) -> list[str]: ...

    def spawn(
        self, session: Session, resolution: SpawnResolution, *, background: bool | None = None
    ) -> list[TaskRecord]: ...

    def children(self, session: Session) -> list[TaskRecord]: ...

    def find(self, session: Session, key: str) -> TaskRecord | None: ...

    def detach(self, records: Iterable[TaskRecord]) -> list[TaskRecord]: ...

    async def wait(self, records: Iterable[TaskRecord], timeout: float | None = None) -> bool: ...

    async def queued(self, records: Sequence[TaskRecord]) -> None: ...

    def queue_position(self, record: TaskRecord) -> int | None: ...

    def cancel(self, record: TaskRecord, reason: str | None = None) -> bool: ...

    def interrupt(self, record: TaskRecord) -> bool: ...

    def revive(self, record: TaskRecord, message: str) -> bool: ...

    async def send(self, record: TaskRecord, message: str) -> int | None: ...


# -- result texts --------------------------------------------------------------------------------


def _handle(record: TaskRecord) -> str:
    return f'[task_id: {record.id} — continue with task_send(to="{record.id}", message="...")]'


def _missing(records: list[TaskRecord]) -> str:
    names = list(dict.fromkeys(name for r in records for name in r.missing_skills))
    return f"Missing skills: {', '.join(names)}." if names else ""


def _outcome(record: TaskRecord) -> str:
    if record.status == TaskStatus.COMPLETED or record.status == TaskStatus.INTERRUPTED:
        said = record.final_text
    else:
        said = record.error or f"The task ended {record.status}."
    note = compaction_note(record)
    return f"{said}\n\n[{note}]" if note else said


def _state(manager: TaskHost, record: TaskRecord) -> str:
    position = manager.queue_position(record) if record.status == TaskStatus.PENDING else None
    return f"{record.status}, queued at position {position}" if position else str(record.status)


def started_text(manager: TaskHost, records: list[TaskRecord]) -> str:
    """What ``task`` answers right away for a background spawn."""
    if len(records) == 1:
        record = records[0]
        started = f"Started task {record.label} ({record.id}, {_state(manager, record)})."
        lines = [
            f"{started} Its result is delivered to you automatically when it finishes; end your "
            "turn if no independent work remains."
            if manager.delivers_results
            else f"{started} {prompt_text('not_delivered.md')}"
        ]
    else:
        lines = ["Batch running."]
        lines += [f"{n}. {r.label} {r.id} ({r.status})" for n, r in enumerate(records, start=1)]
        if not manager.delivers_results:
            lines.append(prompt_text("not_delivered.md"))
    missing = _missing(records)
    return "\n".join([*lines, missing] if missing else lines)


def finished_text(records: list[TaskRecord]) -> str:
    """What ``task`` answers after waiting for a foreground spawn."""
    missing = _missing(records)
    if len(records) == 1:
        record = records[0]
        parts = [_outcome(record), *([missing] if missing else []), _handle(record)]
        return "\n\n".join(parts)
    statuses = {r.status for r in records}
    if TaskStatus.ERROR in statuses:
        head = "Batch error."
    elif TaskStatus.CANCELLED in statuses:
        head = "Batch cancelled."
    else:
        head = "Batch completed."
    lines = [head]
    lines += [f"{n}. {r.label} ({r.status}): {_outcome(r)}" for n, r in enumerate(records, start=1)]
    if missing:
        lines.append(missing)
    return "\n".join(lines)


def still_running_text(records: list[TaskRecord], waited: float) -> str:
    """What a foreground ``task`` answers when its caller's wait limit passed first."""
    lines = [
        prompt_text("still_running.md").format(
            label=r.label, task_id=r.id, status=r.status, waited=f"{waited:g}"
        )
        for r in records
    ]
    return "\n\n".join(lines)


def _details(records: list[TaskRecord]) -> dict[str, Any]:
    return {
        "task_ids": [r.id for r in records],
        "statuses": [str(r.status) for r in records],
    }


# -- companion parameters ------------------------------------------------------------------------


class SendArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    to: str
    message: str | None = None
    deliver_as: Literal["followUp", "steer", "interrupt"] = "followUp"


class OutputArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    task_id: str | None = None
    name: str | None = None
    mode: Literal["status", "tail", "full"] = "status"
    tail_lines: int = Field(default=60, ge=1, le=2000)


class CancelArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    task_id: str | None = None
    name: str | None = None
    reason: str | None = None


def _prepare_companion(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        cleaned: Any
        if key == "tail_lines":
            cleaned = value if isinstance(value, int) or non_blank_text(value) else None
        elif key in ("message", "reason"):
            cleaned = non_blank_text(value)
        else:
            cleaned = identifier(value)
        if cleaned is not None:
            out[key] = cleaned
    return out


def _unknown(manager: TaskHost, session: Session, key: str) -> ToolError:
    known = ", ".join(
        f"{r.id}" + (f" ({r.name})" if r.name else "") + f" {r.status}"
        for r in manager.children(session)
    )
    return ToolError(
        "unknown_task",
        f'No task "{clip_shown(key)}" in this conversation. Your tasks: {known or "(none yet)"}.',
    )


def _lookup(manager: TaskHost, session: Session, args: OutputArgs | CancelArgs) -> TaskRecord:
    key = args.task_id or args.name
    if key is None:
        raise ToolError("no_task_id", "Give task_id or name of one of your tasks.")
    record = manager.find(session, key)
    if record is None:
        raise _unknown(manager, session, key)
    return record


# -- the tools -----------------------------------------------------------------------------------


def task_tools(manager: TaskHost, session: Session) -> list[ToolSpec[Any]]:
    """The four task tools bound to ``session``."""

    def check_task(params: TaskArgs, ctx: ToolContext) -> ToolError | None:
        # resolution and every spawn rule run in the semantic stage: nothing starts before them
        resolution = manager.resolve(params, session)
        if resolution.kind == "error":
            return resolution.error or ToolError("invalid_arguments", "invalid task call")
        try:
            manager.check_spawn(session, resolution)
        except ToolError as exc:
            return exc
        ctx.resolved = resolution
        return None

    async def run_task(params: TaskArgs, ctx: ToolContext) -> ToolResult:
        resolution = ctx.resolved
        if not isinstance(resolution, SpawnResolution):  # called without the semantic stage
            rejection = check_task(params, ctx)
            if rejection is not None:
                raise rejection
            resolution = ctx.resolved
        records = manager.spawn(session, resolution)
        await manager.queued(records)
        if resolution.background:
            return ToolResult(started_text(manager, records), _details(records))
        limit = ctx.extras.get(FOREGROUND_WAIT)
        try:
            finished = await manager.wait(
                records, timeout=float(limit) if isinstance(limit, int | float) else None
            )
        except asyncio.CancelledError:
            # a run that stops to be resumed elsewhere (a worker leaving, a --no-wait exit)
            # leaves its children to the executors: its replayed call finds them there
            if not manager.engine.leaving:
                for record in records:
                    manager.cancel(record, "the parent's turn was cancelled")
            raise
        if not finished:  # the caller cannot wait longer (an MCP host cuts calls at ~60 s)
            detached = manager.detach(records)
            return ToolResult(still_running_text(detached, float(limit or 0)), _details(records))
        details = _details(records)
        return ToolResult(
            finished_text(records),
            details,
            is_error=all(r.status != TaskStatus.COMPLETED for r in records),
        )

    async def run_send(params: SendArgs, ctx: ToolContext) -> str:
        record = manager.find(session, params.to)
        if record is None:
            raise _unknown(manager, session, params.to)
        if params.deliver_as == "interrupt":
            if manager.interrupt(record):
                return f"Interrupting {record.id}: it stops after its current step."
            return f"{record.id} is {record.status}, not running; nothing to interrupt."
        if params.message is None:
            raise ToolError("no_message", 'Give the message to send, or deliver_as="interrupt".')
        # a durable child's message goes to the store: one followed here (a grandchild taken
        # in by its resumed parent) has no session in this process
        if record.status in ACTIVE and (record.session is not None or manager.engine.replays):
            pending = record.status == TaskStatus.PENDING  # as it was when the message came
            position = await manager.send(record, params.message)
            if position is not None:
                if pending:
                    return f"Queued for {record.id} at position {position}."
                return f"Delivered to {record.id}; it reads the message after its current turn."
            # its run (in another process) ended as the message came: once this record has
            # followed it there, the message continues the child instead
            await manager.wait([record], timeout=_ENDED_SECONDS)
        continuable = record.status in SETTLED and record.residency != Residency.DISPOSED
        if continuable and manager.revive(record, params.message):  # evicted: rebuilt first
            return f"Revived {record.id} (run epoch {record.run_epoch})."
        raise ToolError(
            "not_continuable",
            f"{record.id} is {record.status} ({record.residency}) and cannot be continued; "
            f'read it with task_output(task_id="{record.id}") or start a new task.',
        )

    async def run_output(params: OutputArgs, ctx: ToolContext) -> str:
        record = _lookup(manager, session, params)
        return output_text(manager, record.id, params.mode, params.tail_lines)

    async def run_cancel(params: CancelArgs, ctx: ToolContext) -> str:
        record = _lookup(manager, session, params)
        if manager.cancel(record, params.reason):
            return f"Cancelled {record.id}; it was stopped and will not report back."
        return f"{record.id} is {record.status}; nothing changed."

    def companion(name: str, params: type[Any], execute: Any) -> ToolSpec[Any]:
        """A companion of ``task``: described by ``<name>.md``, its padding cleaned alike."""
        return ToolSpec(
            name=name,
            description=prompt_text(f"{name}.md"),
            params=params,
            execute=execute,
            prepare=_prepare_companion,
            max_retries=manager.config.retries,
        )

    return [
        ToolSpec(
            name="task",
            description=manager.description,
            params=TaskArgs,
            execute=run_task,
            prepare=normalize_task_arguments,
            validate=check_task,
            json_schema=_JSON_SCHEMA,
            max_retries=manager.config.retries,
        ),
        companion("task_send", SendArgs, run_send),
        companion("task_output", OutputArgs, run_output),
        companion("task_cancel", CancelArgs, run_cancel),
    ]


def output_text(manager: TaskHost, task_id: str, mode: str, tail_lines: int = 60) -> str:
    """``task_output``'s answer, read from the store (read-only; never revives)."""
    row = manager.store.get(task_id)
    if row is None:
        raise ToolError("unknown_task", f"No task {task_id} in the store.")
    return render_output(row, manager.store.transcript(task_id), mode, tail_lines)


def render_output(row: dict[str, Any], transcript: list[str], mode: str, tail_lines: int) -> str:
    """A task record in one of ``status`` / ``tail`` / ``full`` form."""
    if mode == "tail":
        shown = transcript[-tail_lines:]
        head = f"{row['id']} {row['status']}: last {len(shown)} of {len(transcript)} lines"
        return "\n".join([head, *shown])
    if mode == "full":
        text = "\n".join(transcript)
        if len(text) > FULL_OUTPUT_CAP:
            cut = len(text) - FULL_OUTPUT_CAP
            text = (
                text[:FULL_OUTPUT_CAP]
                + f'\n[{cut} more characters elided; use mode="tail" for the latest lines]'
            )
        return f"{row['id']} {row['status']}: full transcript\n{text}"
    lines = [
        f"{row['id']} {row['status']} ({row['residency']}, run epoch {row['run_epoch']})",
        f"label: {row['label']}" + (f"  name: {row['name']}" if row["name"] else ""),
        f"target: {row['target_kind']} {row['target']}  model: {row['model']}",
    ]
    if row["error"]:
        lines.append(f"error: {row['error']}")
    if row["final_text"]:
        lines += ["final text:", row["final_text"]]
    return "\n".join(lines)
