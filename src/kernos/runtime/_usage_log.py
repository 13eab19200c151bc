"""The ``usage`` table: one row per model response of every session that records its turns,
whichever process and engine ran it (``kernos run``, ``kernos mcp``, a ``kernos worker``), a
failed prompt's responses included. :class:`kernos.runtime.Session` writes it, buffered like its
turns; ``kernos usage`` and ``kernos sessions`` read it. Its own migration namespace, so the
runtime's and the tasks' schemas stay untouched."""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from typing import Any

from kernos.runtime._store import Migration, Store

MIGRATIONS: list[Migration] = [
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
        "usage keys of durable runs",
        # a durable run replayed after a crash gets its recorded responses back and reports
        # them again: each carries a key that is the same on every replay (as turns do)
        """
        ALTER TABLE usage ADD COLUMN run_key TEXT;
        CREATE UNIQUE INDEX usage_run_key ON usage(session_id, run_key)
        """,
    ),
]

_INSERT = (
    "INSERT INTO usage (session_id, agent, model, provider, input_tokens, output_tokens,"
    " cached_tokens, created_at, run_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id, run_key) DO NOTHING"
)

_migrated: weakref.WeakSet[Store] = weakref.WeakSet()


def open_usage(store: Store) -> Store:
    """``store`` with its usage table migrated (once per open store)."""
    if store not in _migrated:
        store.migrate("usage", MIGRATIONS)
        _migrated.add(store)
    return store


def record_usage(
    store: Store,
    session_id: str,
    agent: str,
    entries: Sequence[dict[str, Any]],
    keys: Sequence[str | None],
) -> None:
    """Buffer one row per entry of :func:`kernos.runtime._usage.response_usage`; an entry whose
    key (its place in a durable run) the session already has is not recorded again."""
    if not entries:
        return
    open_usage(store)
    now = time.time()
    for entry, key in zip(entries, keys, strict=True):
        store.write_later(
            _INSERT,
            (session_id, agent, entry["model"], entry["provider"], entry["input_tokens"],
             entry["output_tokens"], entry["cached_tokens"], now, key),
        )  # fmt: skip
