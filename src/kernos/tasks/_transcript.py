"""A child's transcript: the events of its session, written as the task's events in the store
(what ``kernos tasks show`` and ``task_output`` read), keyed so a replayed run writes each once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernos.boundary import repairs_data
from kernos.tasks._store import progress_payload

if TYPE_CHECKING:
    from kernos.runtime import SessionEvent
    from kernos.tasks._record import TaskRecord
    from kernos.tasks._store import TaskStore


def record_event(store: TaskStore, record: TaskRecord, event: SessionEvent) -> None:
    """One event of ``record``'s child session as the task's event in ``store`` (its
    transcript: ``kernos tasks show``, ``task_output``), passed on to the parent's listener."""
    data = event.data
    if event.kind == "prompt":
        _event(store, record, "message", {"role": "user", "text": data.get("text", "")})
    elif event.kind == "text":
        _event(store, record, "message", {"role": "assistant", "text": data.get("text", "")})
    elif event.kind == "tool_call":
        _event(
            store,
            record,
            "tool_call",
            {"name": data.get("name"), "args": data.get("args")},
            data.get("call_id"),
        )
    elif event.kind == "normalized":
        _event(
            store,
            record,
            "normalized",
            {"name": data.get("name"), "repairs": repairs_data(data["repairs"])},
            data.get("call_id"),
        )
    elif event.kind == "compaction":  # where the child's context was compacted
        keys = ("first_turn", "last_turn", "status", "model", "drafts")
        payload = {key: data.get(key) for key in keys}
        # sizes under keys the store's scrubber does not read as secrets ("token")
        payload.update(
            before=data.get("tokens_before"),
            after=data.get("tokens_after"),
            losses=data.get("losses") or [],
        )
        _event(store, record, "compaction", payload)
    elif event.kind == "tool_result":
        result = data.get("result")
        _event(
            store,
            record,
            "tool_result",
            {
                "name": data.get("name"),
                "text": getattr(result, "text", ""),
                "is_error": getattr(result, "is_error", False),
            },
            data.get("call_id"),
        )
    elif event.kind == "progress":
        # unkeyed: a replayed call need not report the same progress (it moves no ordinal)
        store.event(record.id, "progress", progress_payload(data))
    if record.parent.on_event is not None:
        record.parent.on_event(event)


def _event(
    store: TaskStore, record: TaskRecord, kind: str, payload: dict[str, Any], call: Any = None
) -> None:
    """One transcript event of ``record``'s run. In a durable run it is keyed by its
    ordinal (``EPOCH:N``; prompts, texts and tool calls come in the same order on every
    replay), a tool result by its call's key (``EPOCH:Nr``): a replay's results may come
    back in another order when a recorded one is returned and an in-flight one re-run; a
    receipt by its call's key too (``EPOCH:Nn``), so it does not move the ordinals."""
    key = None
    if record.run_key is not None:
        called = record.calls_keyed.pop(call, None) if kind == "tool_result" and call else None
        repaired = record.calls_keyed.get(call) if kind == "normalized" and call else None
        if repaired is not None:
            key = repaired + "n"
        elif called is not None:
            key = called + "r"
        else:
            record.events_keyed += 1
            key = f"{record.run_key}:{record.events_keyed}"
            if kind == "tool_call" and call:
                record.calls_keyed[call] = key
    store.event(record.id, kind, payload, key=key)
