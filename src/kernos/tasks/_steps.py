"""Tool calls as recorded steps: a durable child's tool call runs once, however often its run is
replayed.

:func:`stepped` wraps a tool so that its whole call — the boundary pipeline from the arguments
the model sent to the result the model reads, errors included — is one step of a durable run.
``run`` executes the call the first time and records its result; a run resumed after a crash gets
the recorded result back, and the tool does not run again (an email is not sent twice). The DBOS
engine supplies ``run`` (:mod:`kernos.tasks._dbos`) and wraps a child's tools only there; the
local engine leaves them alone.

The step starts before anything of the call is awaited, so the calls of one model turn, which
the model runtime starts in the model's order, draw their step ids in that order even when run in
parallel: a replay matches each recorded result to the same call.

Records are plain JSON (:func:`tool_record`, scrubbed of secrets): they survive an upgrade of
kernos, and the system database never holds what the store may not.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pydantic_core
from pydantic import BaseModel

from kernos.boundary import (
    ToolContext,
    ToolResult,
    ToolSpec,
    call_tool,
    repairs_data,
    repairs_from_data,
)
from kernos.runtime import scrub_result

#: one recorded call: ``{"text": str, "details": {...}, "is_error": bool}``
ToolRecord = dict[str, Any]
#: runs ``call`` as the step of tool ``name`` (or returns its recorded result)
RunStep = Callable[[str, Callable[[], Coroutine[Any, Any, ToolRecord]]], Awaitable[ToolRecord]]

_WRAPPED = "_kernos_stepped"


def tool_record(result: ToolResult) -> ToolRecord:
    """``result`` as plain JSON; a detail JSON cannot hold is kept as its text."""
    details = json.loads(pydantic_core.to_json(result.details, fallback=str))
    record: ToolRecord = {
        "text": result.text,
        "details": details if isinstance(details, dict) else {},
        "is_error": result.is_error,
    }
    if result.repairs:  # the receipt comes back with a replayed result too
        repairs = repairs_data(result.repairs)
        record["repairs"] = json.loads(pydantic_core.to_json(repairs, fallback=str))
    return record


def tool_result(record: Any) -> ToolResult:
    """The result a record holds; an unreadable record is an error result saying so."""
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        return ToolResult(
            text="The recorded result of this tool call cannot be read; call the tool again "
            "if its effect is still needed.",
            details={"code": "step_record_unreadable", "stage": "execute"},
            is_error=True,
        )
    details = record.get("details")
    return ToolResult(
        text=record["text"],
        details=dict(details) if isinstance(details, dict) else {},
        is_error=bool(record.get("is_error")),
        repairs=repairs_from_data(record.get("repairs")),
    )


class _Call(BaseModel):
    """The decoded arguments, untouched: the wrapped tool's own pipeline reads them."""

    args: Any = None


def _whole(raw: Any) -> dict[str, Any]:
    return {"args": raw}


def unwrapped(spec: ToolSpec[Any]) -> ToolSpec[Any]:
    """The tool a :func:`stepped` tool wraps (``spec`` itself when it wraps none)."""
    inner = getattr(spec, _WRAPPED, None)
    return inner if isinstance(inner, ToolSpec) else spec


def stepped(spec: ToolSpec[Any], run: RunStep) -> ToolSpec[Any]:
    """``spec`` with each call one step of ``run``: the model sees the same name, description
    and schema, and the same result; a tool that is already stepped is wrapped afresh (a child
    granting its tools to its own child does not nest steps)."""
    inner = unwrapped(spec)

    async def execute(params: _Call, ctx: ToolContext) -> ToolResult:
        async def call() -> ToolRecord:
            return tool_record(scrub_result(await call_tool(inner, params.args, ctx)))

        return tool_result(await run(inner.name, call))

    outer: ToolSpec[Any] = ToolSpec(
        name=inner.name,
        description=inner.description,
        params=_Call,
        execute=execute,
        prepare=_whole,
        json_schema=inner.schema(),
        max_retries=inner.max_retries,
        receipts=False,  # the inner call_tool finds them, and the record keeps them
    )
    object.__setattr__(outer, _WRAPPED, inner)  # frozen: the link is set once, here
    return outer
