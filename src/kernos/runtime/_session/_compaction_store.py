"""The ``compactions`` table: one row per compaction a session tried (its own migration namespace,
``compaction``, applied to a store on its first use here, like the task and approval stores: the
store never imports its subsystems). The turns a compaction covered stay in ``turns``: a row
says which, the sizes before and after, the model that wrote the summary, how many drafts it took,
the declared losses, the verdict, and the approved summary itself, which is what a resumed or
revived session is sent instead of those turns (:func:`latest_summary`)."""

from __future__ import annotations

import json
import time
import weakref
from typing import TYPE_CHECKING, Any

from kernos.runtime._rules._compaction import Summary

if TYPE_CHECKING:
    from kernos.runtime._store._store import Store
    from kernos.runtime._store._store_migrations import Migration

NAMESPACE = "compaction"

COMPACTION_MIGRATIONS: list[Migration] = [
    (
        1,
        "compactions",
        """
        CREATE TABLE compactions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            first_turn INTEGER NOT NULL,
            last_turn INTEGER NOT NULL,
            tokens_before INTEGER NOT NULL DEFAULT 0,
            tokens_after INTEGER NOT NULL DEFAULT 0,
            model TEXT,
            drafts INTEGER NOT NULL DEFAULT 0,
            losses TEXT NOT NULL DEFAULT '[]',
            status TEXT NOT NULL,
            verdict TEXT,
            summary TEXT,
            reason TEXT,
            created_at REAL NOT NULL
        );
        CREATE INDEX compactions_session ON compactions(session_id, id)
        """,
    ),
]

#: the stores this process already migrated (a store is migrated once, on first use)
_MIGRATED: weakref.WeakSet[Store] = weakref.WeakSet()


def migrated(store: Store) -> Store:
    """``store`` with the ``compactions`` table (its migrations applied on first use)."""
    if store not in _MIGRATED:
        store.migrate(NAMESPACE, COMPACTION_MIGRATIONS)
        _MIGRATED.add(store)
    return store


_INSERT = (
    "INSERT INTO compactions (session_id, agent, first_turn, last_turn, tokens_before,"
    " tokens_after, model, drafts, losses, status, verdict, summary, reason, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def record_compaction(store: Store, row: dict[str, Any]) -> None:
    """Buffer one compaction row (``row`` has the table's columns but ``id`` and
    ``created_at``; ``losses`` a list of ``{"content", "reason"}``)."""
    migrated(store).write_later(
        _INSERT,
        (
            row["session_id"],
            row["agent"],
            row["first_turn"],
            row["last_turn"],
            row.get("tokens_before", 0),
            row.get("tokens_after", 0),
            row.get("model"),
            row.get("drafts", 0),
            json.dumps(row.get("losses") or [], ensure_ascii=False),
            row["status"],
            row.get("verdict"),
            row.get("summary"),
            row.get("reason"),
            time.time(),
        ),
    )


def compactions(store: Store, session_id: str) -> list[dict[str, Any]]:
    """The compactions ``session_id`` tried, oldest first; each with its ``ratio`` (the share
    of the request's tokens saved, 0 when nothing was measured)."""
    migrated(store).flush()
    rows = store.query("SELECT * FROM compactions WHERE session_id = ? ORDER BY id", (session_id,))
    out = []
    for row in rows:
        item = dict(row)
        item["losses"] = json.loads(item["losses"] or "[]")
        before, after = item["tokens_before"], item["tokens_after"]
        item["ratio"] = round((before - after) / before, 4) if before and after else 0.0
        out.append(item)
    return out


def latest_summary(store: Store, session_id: str) -> Summary | None:
    """The newest approved summary of ``session_id``: what a resumed session is sent instead of
    the turns it covers (``None``: it never compacted)."""
    rows = [r for r in compactions(store, session_id) if r["status"] == "approved"]
    if not rows:
        return None
    row = rows[-1]
    losses = tuple((str(x.get("content", "")), str(x.get("reason", ""))) for x in row["losses"])
    return Summary(row["first_turn"], row["last_turn"], row["summary"] or "", losses)


def compaction_text(row: dict[str, Any]) -> str:
    """One compaction as transcript text (``kernos sessions show``, ``kernos tasks output``):
    its turns, sizes, ratio, verdict and each declared loss. ``row`` is a :func:`compactions`
    row or a ``compaction`` event's payload (its sizes under ``before`` and ``after``)."""
    before = _count(row.get("tokens_before", row.get("before")))
    after = _count(row.get("tokens_after", row.get("after")))
    losses = list(row.get("losses") or [])
    sizes = f"{before} → {after} tokens ({(before - after) / before:.1%} smaller)"
    head = (
        f"[compaction] turns {row.get('first_turn')}–{row.get('last_turn')}: "
        f"{row.get('status')}, "
        + (sizes if after and before else f"{before} tokens")
        + f", {row.get('drafts', 0)} draft(s) by {row.get('model') or '?'}, "
        f"{len(losses)} declared loss(es)"
    )
    lines = [head]
    for loss in losses:
        lines.append(f"  - {loss.get('content', '')}")
        lines.append(f"    because: {loss.get('reason', '')}")
    return "\n".join(lines)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
