"""Task events as transcript text (``kernos tasks show``, ``task_output``, the MCP resources)."""

from __future__ import annotations

import json
from typing import Any


def render_event(kind: str, payload: dict[str, Any]) -> str:
    """One event as transcript text."""
    if kind == "message":
        return f"[{payload.get('role', '?')}] {payload.get('text', '')}"
    if kind == "tool_call":
        args = json.dumps(payload.get("args"), ensure_ascii=False, default=str)
        return f"[tool_call] {payload.get('name', '?')} {args}"
    if kind == "normalized":
        # `tasks output` reads the store without the boundary; a receipt is rare (startup)
        from kernos.boundary import describe_repairs, repairs_from_data

        found = repairs_from_data(payload.get("repairs"))
        line = describe_repairs(str(payload.get("name", "?")), found)
        return f"[normalized] {line}"
    if kind == "tool_result":
        mark = " (error)" if payload.get("is_error") else ""
        return f"[tool_result] {payload.get('name', '?')}{mark}: {payload.get('text', '')}"
    if kind == "progress":
        return f"[progress] {payload.get('name', '?')} {progress_text(payload)}"
    if kind == "compaction":
        from kernos.runtime import compaction_text

        return compaction_text(payload)
    if kind == "status":
        why = f" — {payload['why']}" if payload.get("why") else ""
        epoch = f" (run epoch {payload['epoch']})" if payload.get("epoch") else ""
        start = payload.get("from") or "created"
        return f"[status] {start} → {payload.get('to')}{epoch}{why}"
    fields = " ".join(f"{key}={_plain(value)}" for key, value in payload.items())
    return f"[{kind}] {fields}" if fields else f"[{kind}]"


def progress_payload(data: dict[str, Any]) -> dict[str, Any]:
    """What a transcript keeps of a tool's ``progress`` event (the MCP notification's fields)."""
    keys = ("name", "progress", "total", "message")
    return {key: data[key] for key in keys if data.get(key) is not None}


def progress_text(data: dict[str, Any]) -> str:
    """A progress notification as a person reads it: ``3/10 copying`` (``3`` with no total)."""
    done = data.get("progress")
    total = data.get("total")
    amount = f"{done:g}" if isinstance(done, int | float) else "?"
    if isinstance(total, int | float):
        amount += f"/{total:g}"
    message = data.get("message")
    return f"{amount} {message}" if message else amount


def _plain(value: Any) -> str:
    """A payload value as a person reads it: text as is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
