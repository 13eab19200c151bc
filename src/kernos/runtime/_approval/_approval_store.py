"""Approval requests in the store: the ``approvals`` namespace's ``approval_requests`` table.

A request is keyed by the call that asked (``call_key``: the task, its run epoch and the call's
id), so a run that is replayed after a crash finds its own request instead of asking again.
Every move is a conditional ``UPDATE`` of an ``open`` row (:meth:`ApprovalStore.settle`): of two
answerers exactly one wins; the other reads who did. The rules are
:mod:`kernos.runtime._rules._approval_state`'s.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, Protocol

from kernos.runtime._rules._approval_state import (
    ApprovalState,
    StoredRequest,
    already_answered,
    can_move,
    new_request_id,
)
from kernos.runtime._secrets import redact, scrub_text, scrub_value
from kernos.runtime._store._store import Migration, Store

NAMESPACE = "approvals"

MIGRATIONS: list[Migration] = [
    (
        1,
        "approval requests",
        """
        CREATE TABLE approval_requests (
            id TEXT PRIMARY KEY,
            call_key TEXT NOT NULL UNIQUE,
            task_id TEXT,
            session_id TEXT,
            agent TEXT NOT NULL DEFAULT '',
            tool TEXT NOT NULL,
            arguments TEXT NOT NULL DEFAULT '{}',
            preview TEXT,
            why TEXT NOT NULL DEFAULT '',
            state TEXT NOT NULL,
            asked_at REAL NOT NULL,
            answered_by TEXT,
            answered_how TEXT,
            answered_at REAL,
            reason TEXT
        );
        CREATE INDEX approval_requests_state ON approval_requests(state);
        CREATE INDEX approval_requests_task ON approval_requests(task_id)
        """,
    ),
]


class AskedCall(Protocol):
    """What a request keeps of the call asked (``ApprovalRequest`` in
    ``runtime/_approval/_approval.py`` is one)."""

    @property
    def session_id(self) -> str | None: ...
    @property
    def agent(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def arguments(self) -> dict[str, Any]: ...
    @property
    def preview(self) -> str | None: ...
    @property
    def why(self) -> str: ...


def _asked(call: AskedCall) -> tuple[Any, ...]:
    """The row's session_id, agent, tool, arguments, preview and why columns (the arguments
    and the diff scrubbed of secrets)."""
    arguments = json.dumps(scrub_value(call.arguments), ensure_ascii=False)
    preview = scrub_text(call.preview) if call.preview else None
    return (call.session_id, call.agent, call.tool, arguments, preview, call.why)


class ApprovalStore:
    """The approval requests of one store (migrated on first use)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.migrate(NAMESPACE, MIGRATIONS)

    def ask(self, call_key: str, call: AskedCall, *, task_id: str | None) -> StoredRequest:
        """The request of the call ``call_key``: made now (``open``, committed before this
        returns), or the one an earlier attempt of the same call made, in whatever state."""
        found = self.by_call(call_key)
        if found is not None:
            return found
        for _ in range(8):  # a drawn id another request holds: draw again
            self.store.write_now(
                "INSERT INTO approval_requests (id, call_key, task_id, session_id, agent, tool, "
                "arguments, preview, why, state, asked_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (
                    new_request_id(), call_key, task_id, *_asked(call),
                    str(ApprovalState.OPEN), time.time(),
                ),
            )  # fmt: skip
            found = self.by_call(call_key)
            if found is not None:
                return found
        raise RuntimeError(f"no approval request could be stored for {call_key}")

    def record(
        self,
        call: AskedCall,
        *,
        task_id: str | None,
        approved: bool,
        asked_at: float,
        by: str | None,
        how: str | None,
        reason: str | None,
    ) -> str:
        """Keep a call answered as it was asked (a terminal, a flag, an MCP host, nobody to
        ask): a row made ``approved`` or ``denied`` at once; its id."""
        state = ApprovalState.APPROVED if approved else ApprovalState.DENIED
        request_id = new_request_id()
        key = f"{call.session_id or '-'}:answered:{request_id}:{secrets.token_hex(4)}"
        self.store.write_now(
            "INSERT INTO approval_requests (id, call_key, task_id, session_id, agent, tool, "
            "arguments, preview, why, state, asked_at, answered_by, answered_how, answered_at, "
            "reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                request_id, key, task_id, *_asked(call), str(state), asked_at,
                by, how, time.time(), redact(reason) if reason else None,
            ),
        )  # fmt: skip
        return request_id

    def history(self, limit: int = 50) -> list[StoredRequest]:
        """Every request, answered or not, newest first (at most ``limit``)."""
        rows = self.store.query(
            "SELECT * FROM approval_requests ORDER BY asked_at DESC, id DESC LIMIT ?",
            (max(0, limit),),
        )
        return [StoredRequest.from_row(dict(row)) for row in rows]

    def by_call(self, call_key: str) -> StoredRequest | None:
        rows = self.store.query("SELECT * FROM approval_requests WHERE call_key = ?", (call_key,))
        return StoredRequest.from_row(dict(rows[0])) if rows else None

    def get(self, request_id: str) -> StoredRequest | None:
        rows = self.store.query("SELECT * FROM approval_requests WHERE id = ?", (request_id,))
        return StoredRequest.from_row(dict(rows[0])) if rows else None

    def open_requests(self) -> list[StoredRequest]:
        """Every open request, oldest first."""
        rows = self.store.query(
            "SELECT * FROM approval_requests WHERE state = ? ORDER BY asked_at, id",
            (str(ApprovalState.OPEN),),
        )
        return [StoredRequest.from_row(dict(row)) for row in rows]

    def open_for_task(self, task_id: str) -> list[StoredRequest]:
        """``task_id``'s open requests, oldest first."""
        rows = self.store.query(
            "SELECT * FROM approval_requests WHERE task_id = ? AND state = ? ORDER BY asked_at, id",
            (task_id, str(ApprovalState.OPEN)),
        )
        return [StoredRequest.from_row(dict(row)) for row in rows]

    def answer_task(
        self, task_id: str, approved: bool, *, by: str, how: str, reason: str | None = None
    ) -> str:
        """Answer ``task_id``'s oldest open request (``kernos tasks watch``): what happened, in
        one line."""
        waiting = self.open_for_task(task_id)
        if not waiting:
            return f"{task_id} has no open approval request"
        won, request = self.answer(waiting[0].id, approved, by=by, how=how, reason=reason)
        if request is None or not won:
            return already_answered(request) if request else f"{waiting[0].id} is gone"
        return f"{request.id} {request.state}: {request.tool} of task {task_id}"

    def settle(
        self,
        request_id: str,
        state: ApprovalState,
        *,
        by: str | None = None,
        how: str | None = None,
        reason: str | None = None,
    ) -> tuple[bool, StoredRequest | None]:
        """Move an open request to ``state`` (an answer, a time-out, an expiry): ``(won,
        the request as it now is)``; ``won`` is ``False`` when it was not open any more (its
        row says who moved it) or there is no such request (``None``)."""
        if not can_move(ApprovalState.OPEN, state):
            raise ValueError(f"an approval request cannot become {state}")
        changed = self.store.write_now(
            "UPDATE approval_requests SET state = ?, answered_by = ?, answered_how = ?, "
            "answered_at = ?, reason = ? WHERE id = ? AND state = ? RETURNING id",
            (str(state), by, how, time.time(), redact(reason) if reason else None, request_id,
             str(ApprovalState.OPEN)),
        )  # fmt: skip
        return bool(changed), self.get(request_id)

    def expire_task(self, task_id: str, reason: str) -> list[str]:
        """Close every open request of ``task_id`` as ``expired`` (the task ended); their ids."""
        rows = self.store.write_now(
            "UPDATE approval_requests SET state = ?, answered_at = ?, reason = ? "
            "WHERE task_id = ? AND state = ? RETURNING id",
            (str(ApprovalState.EXPIRED), time.time(), redact(reason), task_id,
             str(ApprovalState.OPEN)),
        )  # fmt: skip
        return [row[0] for row in rows]

    def answer(
        self, request_id: str, approved: bool, *, by: str, how: str, reason: str | None = None
    ) -> tuple[bool, StoredRequest | None]:
        """A person's answer to an open request (see :meth:`settle`): ``(won, request)``."""
        state = ApprovalState.APPROVED if approved else ApprovalState.DENIED
        return self.settle(request_id, state, by=by, how=how, reason=reason or None)
