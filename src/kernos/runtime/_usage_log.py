"""The ``usage`` table: one row per model response of every session that records its turns,
whichever process and engine ran it (``kernos run``, ``kernos mcp``, a ``kernos worker``), a
failed prompt's responses included. :class:`kernos.runtime.Session` writes it, buffered like its
turns; ``kernos usage`` and ``kernos sessions`` read it. Its schema is its own migration namespace
(``usage``), applied as a store opens (:data:`kernos.runtime._store.USAGE_MIGRATIONS`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from kernos.runtime._store import Store

_INSERT = (
    "INSERT INTO usage (session_id, agent, model, provider, input_tokens, output_tokens,"
    " cached_tokens, created_at, run_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id, run_key) DO NOTHING"
)


def open_usage(store: Store) -> Store:
    """``store``, whose usage table is there: a store migrates it as it opens
    (:data:`kernos.runtime._store.USAGE_MIGRATIONS`), so a session's first prompt writes no
    schema on the event loop."""
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
    now = time.time()
    for entry, key in zip(entries, keys, strict=True):
        store.write_later(
            _INSERT,
            (session_id, agent, entry["model"], entry["provider"], entry["input_tokens"],
             entry["output_tokens"], entry["cached_tokens"], now, key),
        )  # fmt: skip
