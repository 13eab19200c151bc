"""The ``usage`` table: one row per model response of every session that records its usage,
whichever process and engine ran it (``kernos run``, ``kernos chat``, ``kernos mcp``, a ``kernos
worker``, ``kernos compress``), a failed prompt's responses included; and the ``usage_calls``
table: one row per tool call the boundary repaired or rejected with a coded error.
:class:`kernos.runtime.Session` writes both, buffered like its turns; ``kernos usage`` and
``kernos sessions`` read them. Their schema is its own migration namespace (``usage``), applied as
a store opens (:data:`kernos.runtime._store._store.USAGE_MIGRATIONS`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from kernos.runtime._session._usage import call_outcome
from kernos.runtime._store._store import Store

_INSERT = (
    "INSERT INTO usage (session_id, agent, model, provider, input_tokens, output_tokens,"
    " cached_tokens, created_at, run_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id, run_key) DO NOTHING"
)
_INSERT_CALL = (
    "INSERT INTO usage_calls (session_id, agent, model, tool, repaired, rejected, created_at,"
    " run_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, run_key) DO NOTHING"
)


def open_usage(store: Store) -> Store:
    """``store``, whose usage table is there: a store migrates it as it opens
    (:data:`kernos.runtime._store._store.USAGE_MIGRATIONS`), so a session's first prompt writes no
    schema on the event loop."""
    return store


def record_usage(
    store: Store,
    session_id: str,
    agent: str,
    entries: Sequence[dict[str, Any]],
    keys: Sequence[str | None],
) -> None:
    """Buffer one row per entry of :func:`kernos.runtime._session._usage.response_usage`; an entry
    whose key (its place in a durable run) the session already has is not recorded again."""
    if not entries:
        return
    now = time.time()
    for entry, key in zip(entries, keys, strict=True):
        store.write_later(
            _INSERT,
            (session_id, agent, entry["model"], entry["provider"], entry["input_tokens"],
             entry["output_tokens"], entry["cached_tokens"], now, key),
        )  # fmt: skip


def record_call(
    store: Store,
    session_id: str,
    agent: str,
    model: str | None,
    tool: str,
    result: Any,
    key: Callable[[], str | None] = lambda: None,
) -> None:
    """Buffer one ``usage_calls`` row for a call whose :class:`~kernos.boundary.ToolResult` the
    boundary repaired or rejected with a coded error
    (:func:`kernos.runtime._session._usage.call_outcome`); other calls are not stored. ``key()``
    gives the row its place in a durable run (called only for a row that is stored, so calls run
    side by side take the same keys on a replay whichever finishes first): a row whose key the
    session already has is not recorded again."""
    repaired, rejected = call_outcome(result)
    if repaired or rejected:
        store.write_later(
            _INSERT_CALL,
            (session_id, agent, model, tool, int(repaired), int(rejected), time.time(), key()),
        )
