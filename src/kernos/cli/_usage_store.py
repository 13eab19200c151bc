"""The ``usage`` table read back (each row with its task and price), and the run's own rows for
``kernos run``'s total line. The sessions write the table (:mod:`kernos.runtime._usage_log`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernos.runtime._usage import price, response_usage
from kernos.runtime._usage_log import open_usage

__all__ = ["UsageRecorder", "open_usage", "usage_rows", "with_cost"]

if TYPE_CHECKING:
    from kernos.runtime import SessionEvent, Store


class UsageRecorder:
    """A session-event callback that keeps the ``usage`` events' rows of a run (its sessions
    store them themselves)."""

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

    TaskStore(store)  # the tasks table exists even in a store that never ran a child
    open_usage(store)
    rows = store.query(
        "SELECT u.*, t.id AS task_id FROM usage u LEFT JOIN tasks t ON t.child_session ="
        " u.session_id WHERE u.created_at >= ? ORDER BY u.id",
        (since or 0.0,),
    )
    return [with_cost(dict(row)) for row in rows]
