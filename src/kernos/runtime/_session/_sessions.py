"""Top-level sessions in the store: the ``sessions`` table (runtime migration 2) and the read
queries ``kernos sessions`` and ``kernos run --continue / --session`` use.

A row is written when :meth:`kernos.runtime.Runtime.session` builds a session that records its
turns; a child task's session has no row (the tasks table is its record). What a session said is
its rows in ``turns``; a listed session has at least one.

A session row is ``{"id", "agent", "model", "turns", "input_tokens", "output_tokens",
"started_at", "last_active", "first_prompt"}`` (times in seconds since the epoch). Its tokens are
the session's own model responses in the ``usage`` table
(:mod:`kernos.runtime._session._usage_log`), a failed prompt's included and its children's not: what
``kernos usage`` counts for it (a session with no usage row, recorded before that table existed,
counts its turns' tokens).
"""

from __future__ import annotations

import json
import time
from typing import Any

from kernos.runtime._session._usage_log import open_usage
from kernos.runtime._store._store import Store

_UPSERT = (
    "INSERT INTO sessions (id, agent, model, created_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (id) DO UPDATE SET agent = excluded.agent, model = excluded.model"
)

_SELECT = """
SELECT s.id AS id, s.agent AS agent, s.model AS model, s.created_at AS started_at,
       COUNT(t.id) AS turns,
       COALESCE((SELECT SUM(u.input_tokens) FROM usage u WHERE u.session_id = s.id),
                SUM(t.input_tokens), 0) AS input_tokens,
       COALESCE((SELECT SUM(u.output_tokens) FROM usage u WHERE u.session_id = s.id),
                SUM(t.output_tokens), 0) AS output_tokens,
       MAX(t.created_at) AS last_active,
       (SELECT f.text FROM turns f WHERE f.session_id = s.id AND f.role = 'user'
        ORDER BY f.id LIMIT 1) AS first_prompt
FROM sessions s {join} turns t ON t.session_id = s.id
{where}
GROUP BY s.id, s.agent, s.model, s.created_at
ORDER BY MAX(t.created_at) DESC, s.created_at DESC, s.id
"""


def record_session(store: Store, session_id: str, agent: str, model: str) -> None:
    """Note a top-level session (buffered, like its turns). A continued session keeps its
    start time; its agent and model become the latest run's."""
    store.write_later(_UPSERT, (session_id, agent, model, time.time()))


def list_sessions(store: Store, limit: int | None = None) -> list[dict[str, Any]]:
    """Top-level sessions with at least one turn, most recently active first."""
    open_usage(store).flush()
    sql = _SELECT.format(join="JOIN", where="")
    if limit is not None:
        sql += " LIMIT ?"
    return [_row(r) for r in store.query(sql, () if limit is None else (max(0, limit),))]


def get_session(store: Store, session_id: str) -> dict[str, Any] | None:
    """The top-level session ``session_id`` (listed even with no turn yet); ``None`` when the
    store has no such session (a child task's session is not one)."""
    open_usage(store).flush()
    sql = _SELECT.format(join="LEFT JOIN", where="WHERE s.id = ?")
    rows = store.query(sql, (session_id,))
    return _row(rows[0]) if rows else None


def latest_session(store: Store) -> dict[str, Any] | None:
    """The most recently active top-level session; ``None`` when there is none."""
    rows = list_sessions(store, limit=1)
    return rows[0] if rows else None


def _row(row: Any) -> dict[str, Any]:
    item = dict(row)
    item["model"] = item["model"] or None
    item["turns"] = int(item["turns"] or 0)
    item["input_tokens"] = int(item["input_tokens"] or 0)
    item["output_tokens"] = int(item["output_tokens"] or 0)
    return item


def session_events(turns: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """A session's stored turns (:meth:`kernos.runtime.Store.turns`) as transcript events, the
    ``(type, payload)`` pairs a child task's transcript is made of (``message``, ``tool_call``,
    ``tool_result``), so ``kernos sessions show`` renders them as ``kernos tasks output`` does."""
    events: list[tuple[str, dict[str, Any]]] = []
    for turn in turns:
        role = turn.get("role")
        if role in ("user", "assistant") and turn.get("text"):
            events.append(("message", {"role": role, "text": turn["text"]}))
        calls = (turn.get("tool_calls") or ()) if role == "assistant" else ()
        for call in calls:
            events.append(
                ("tool_call", {"id": call.get("id"), "name": call.get("name"),
                               "args": _arguments(call.get("args"))})
            )  # fmt: skip
        results = (turn.get("tool_results") or ()) if role == "tool" else ()
        for result in results:
            events.append(
                ("tool_result", {"id": result.get("id"), "name": result.get("name"),
                                 "text": result.get("text", "")})
            )  # fmt: skip
    return events


def _arguments(args: Any) -> Any:
    """A call's arguments as the model sent them: its JSON text decoded when it is JSON (shown
    as an object, as a child's transcript shows them), else the text as it was."""
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args
