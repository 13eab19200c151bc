"""Approval requests as data: their states, the one move an answer makes, and the sentences a
person and a model read about them. Pure (no store, no clock: times are given).

::

    open ──▶ approved | denied       (kernos approve / kernos deny, an MCP host's elicitation)
      │
      ├──▶ timed_out                 (nobody answered within [permissions] wait)
      └──▶ expired                   (the task ended: cancelled, lost)

Only an ``open`` request moves, once: the first answer wins and every later one is told who
answered it, how and when (:func:`already_answered`).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ApprovalState(StrEnum):
    OPEN = "open"
    APPROVED = "approved"
    DENIED = "denied"
    TIMED_OUT = "timed_out"
    EXPIRED = "expired"


#: a person's two answers
ANSWERS = frozenset({ApprovalState.APPROVED, ApprovalState.DENIED})

#: the default of ``[permissions] wait``: how long a call waits for an answer, in seconds
DEFAULT_WAIT = 3600.0
#: how to write ``[permissions] wait``
WAIT_FIX = 'write a duration such as "30m" or "1h" ("0": never wait, deny at once)'


def new_request_id() -> str:
    """A short, typeable request id (``a_`` and 8 hex digits, like a task's ``t_…``)."""
    return "a_" + secrets.token_hex(4)


def can_move(current: ApprovalState, target: ApprovalState) -> bool:
    """Whether a request in ``current`` may become ``target``: only an open one moves."""
    return current == ApprovalState.OPEN and target != ApprovalState.OPEN


@dataclass(frozen=True)
class StoredRequest:
    """One row of ``approval_requests``."""

    id: str
    call_key: str
    task_id: str | None
    session_id: str | None
    agent: str
    tool: str
    arguments: dict[str, Any]
    preview: str | None
    why: str
    state: ApprovalState
    asked_at: float
    answered_by: str | None = None
    answered_how: str | None = None
    answered_at: float | None = None
    reason: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> StoredRequest:
        return cls(
            id=row["id"],
            call_key=row["call_key"],
            task_id=row["task_id"],
            session_id=row["session_id"],
            agent=row["agent"] or "",
            tool=row["tool"],
            arguments=dict(json.loads(row["arguments"] or "{}")),
            preview=row["preview"],
            why=row["why"] or "",
            state=ApprovalState(row["state"]),
            asked_at=float(row["asked_at"]),
            answered_by=row["answered_by"],
            answered_how=row["answered_how"],
            answered_at=row["answered_at"],
            reason=row["reason"],
        )

    def as_json(self) -> dict[str, Any]:
        """The request as ``kernos approvals --json`` shows it (stable keys)."""
        return {
            "id": self.id,
            "task_id": self.task_id,
            "session_id": self.session_id,
            "agent": self.agent,
            "tool": self.tool,
            "arguments": self.arguments,
            "diff": self.preview,
            "why": self.why,
            "state": str(self.state),
            "asked_at": self.asked_at,
            "answered_by": self.answered_by,
            "answered_how": self.answered_how,
            "answered_at": self.answered_at,
            "reason": self.reason,
        }


def already_answered(request: StoredRequest) -> str:
    """Why ``request`` cannot be answered any more: who answered it, how, and the reason."""
    state = request.state
    if state == ApprovalState.TIMED_OUT:
        return f"request {request.id} is closed: nobody answered it within [permissions] wait"
    if state == ApprovalState.EXPIRED:
        why = f" ({request.reason})" if request.reason else ""
        return f"request {request.id} is closed: its task ended before it was answered{why}"
    who = request.answered_by or "someone"
    how = f" with {request.answered_how}" if request.answered_how else ""
    reason = f": {request.reason}" if request.reason else ""
    return f"request {request.id} was already {state} by {who}{how}{reason}"


def denial_reason(request: StoredRequest) -> str:
    """What the model reads for a request that ended without approval (``ToolError`` text)."""
    if request.state == ApprovalState.TIMED_OUT:
        return (
            f"nobody answered approval request {request.id} within [permissions] wait, so the "
            "call was denied"
        )
    if request.state == ApprovalState.EXPIRED:
        return f"approval request {request.id} expired: {request.reason or 'its task ended'}"
    who = request.answered_by or "a person"
    return f"{who} denied it" + (f" ({request.reason})" if request.reason else "")
