"""The ``usage`` table: one row per model response of every session of a run, children included
(its own migration namespace, so the runtime's and the tasks' schemas stay untouched)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kernos.runtime._usage import call_outcome, price, response_usage

if TYPE_CHECKING:
    from kernos.runtime import SessionEvent, Store

MIGRATIONS = [
    (
        1,
        "usage per model response",
        """
        CREATE TABLE usage (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            model TEXT,
            provider TEXT,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            cached_tokens INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        );
        CREATE INDEX usage_created ON usage(created_at);
        CREATE INDEX usage_session ON usage(session_id)
        """,
    ),
    (
        2,
        "tool calls the boundary repaired or rejected, per model",
        """
        CREATE TABLE usage_calls (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            model TEXT,
            tool TEXT,
            repaired INTEGER NOT NULL DEFAULT 0,
            rejected INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        );
        CREATE INDEX usage_calls_created ON usage_calls(created_at)
        """,
    ),
]


def open_usage(store: Store) -> Store:
    store.migrate("usage", MIGRATIONS)
    return store


class UsageRecorder:
    """A session-event callback that stores each ``usage`` event and keeps the run's rows."""

    def __init__(self, store: Store) -> None:
        self.store = open_usage(store)
        self.rows: list[dict[str, Any]] = []

    def __call__(self, event: SessionEvent) -> None:
        if event.kind == "tool_result":
            self._call(event)
            return
        if event.kind != "usage":
            return
        now = time.time()
        for entry in response_usage(event.data.get("responses") or ()):
            self.store.execute(
                "INSERT INTO usage (session_id, agent, model, provider, input_tokens,"
                " output_tokens, cached_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (event.session_id, event.agent, entry["model"], entry["provider"],
                 entry["input_tokens"], entry["output_tokens"], entry["cached_tokens"], now),
            )  # fmt: skip
            self.rows.append({**entry, "session_id": event.session_id, "agent": event.agent})

    def _call(self, event: SessionEvent) -> None:
        """A call the boundary repaired (its ``normalized`` event came just before) or rejected
        with a coded error: one row; other calls are not stored."""
        repaired, rejected = call_outcome(event.data["result"])
        if repaired or rejected:
            self.store.execute(
                "INSERT INTO usage_calls (session_id, agent, model, tool, repaired, rejected,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (event.session_id, event.agent, event.data.get("model"), event.data.get("name"),
                 int(repaired), int(rejected), time.time()),
            )  # fmt: skip

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


def call_rows(store: Store, since: float | None) -> list[dict[str, Any]]:
    """Stored repaired / rejected tool calls (oldest first), each with its task id."""
    from kernos.tasks import TaskStore

    TaskStore(store)
    open_usage(store)
    rows = store.query(
        "SELECT c.*, t.id AS task_id FROM usage_calls c LEFT JOIN tasks t ON t.child_session ="
        " c.session_id WHERE c.created_at >= ? ORDER BY c.id",
        (since or 0.0,),
    )
    return [dict(row) for row in rows]
