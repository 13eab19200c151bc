"""The ``usage`` and ``usage_calls`` tables read back (each row with its task and price), and the
run's own rows for ``kernos run``'s total line. The sessions write both tables
(:mod:`kernos.runtime._session._usage_log`); :class:`kernos.tasks.TaskStore` reads them (no SQL
here)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kernos.runtime import open_usage, price, response_usage

__all__ = ["UsageRecorder", "call_rows", "open_usage", "usage_rows", "with_cost"]

if TYPE_CHECKING:
    from kernos.runtime import SessionEvent, Store


class UsageRecorder:
    """A session-event callback that keeps the ``usage`` events' rows of a run, for its total
    line (its sessions store them, and their repaired / rejected calls, themselves)."""

    def __init__(self, store: Store) -> None:
        self.store = open_usage(store)
        self.rows: list[dict[str, Any]] = []

    def __call__(self, event: SessionEvent) -> None:
        if event.kind != "usage":
            return
        for entry in response_usage(event.data.get("responses") or ()):
            self.rows.append({**entry, "session_id": event.session_id, "agent": event.agent})

    def priced(self) -> list[dict[str, Any]]:
        return [with_cost(r) for r in self.rows]


def with_cost(row: dict[str, Any]) -> dict[str, Any]:
    cost = price(
        row["model"], row["provider"], row["input_tokens"], row["output_tokens"],
        row["cached_tokens"],
    )  # fmt: skip
    return {**row, "cost": cost}


def usage_rows(store: Store, since: float | None) -> list[dict[str, Any]]:
    """Stored rows (newest last), each with its task id (None for a main session) and cost."""
    from kernos.tasks import TaskStore

    return [with_cost(row) for row in TaskStore(store).usage_rows(since)]


def session_totals(store: Store, session_ids: Iterable[str | None]) -> dict[str, dict[str, Any]]:
    """Each session's usage summed (:func:`kernos.runtime.total`: requests, tokens, cost), for
    the sessions of ``session_ids`` that have usage rows."""
    from kernos.runtime import total
    from kernos.tasks import TaskStore

    found = TaskStore(store).session_usage([sid for sid in session_ids if sid])
    return {sid: total([with_cost(row) for row in rows]) for sid, rows in found.items()}


def call_rows(store: Store, since: float | None) -> list[dict[str, Any]]:
    """Stored repaired / rejected tool calls (oldest first), each with its task id."""
    from kernos.tasks import TaskStore

    return TaskStore(store).call_rows(since)
