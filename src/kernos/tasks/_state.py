"""Task status and residency: explicit enums and the transition table.

::

    pending ──▶ running ──▶ completed | error | interrupted ──(revive)──▶ pending | running
       │         ▲  │
       │  waiting ◀─┘  (a tool call waits for a person's approval: kernos.tasks._approvals)
       │     │
       └─────┴─────┴──▶ cancelled     pending | running | waiting ──(crash)──▶ lost

``cancelled`` and ``lost`` are final. A move the table does not allow is refused by
:func:`can_move` and the caller logs it and leaves the record as it was.
"""

from __future__ import annotations

from enum import StrEnum


class TaskStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"
    LOST = "lost"


class Residency(StrEnum):
    """Whether the child's conversation is still in memory (``resident``) and can be revived."""

    RESIDENT = "resident"
    EVICTED = "evicted"
    DISPOSED = "disposed"


_S = TaskStatus

TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    _S.PENDING: frozenset({_S.RUNNING, _S.CANCELLED, _S.LOST}),
    _S.RUNNING: frozenset(
        {_S.WAITING, _S.COMPLETED, _S.ERROR, _S.INTERRUPTED, _S.CANCELLED, _S.LOST}
    ),
    _S.WAITING: frozenset(
        {_S.RUNNING, _S.COMPLETED, _S.ERROR, _S.INTERRUPTED, _S.CANCELLED, _S.LOST}
    ),
    _S.COMPLETED: frozenset({_S.PENDING, _S.RUNNING}),
    _S.ERROR: frozenset({_S.PENDING, _S.RUNNING}),
    _S.INTERRUPTED: frozenset({_S.PENDING, _S.RUNNING}),
    _S.CANCELLED: frozenset(),
    _S.LOST: frozenset(),
}

#: A child in one of these states is alive: it holds a concurrency slot or waits for one.
#: (``waiting``: its run is paused on an approval request, see :mod:`kernos.tasks._approvals`)
ACTIVE = frozenset({_S.PENDING, _S.RUNNING, _S.WAITING})
#: A run ended; a resident child in one of these states can be revived by ``task_send``.
SETTLED = frozenset({_S.COMPLETED, _S.ERROR, _S.INTERRUPTED})
#: Final: nothing moves a record out of these.
FINAL = frozenset({_S.CANCELLED, _S.LOST})
#: A background child reaching one of these wakes its parent with a completion notice.
NOTIFY = frozenset({_S.COMPLETED, _S.ERROR, _S.LOST})


def can_move(current: TaskStatus, target: TaskStatus) -> bool:
    """Whether the transition table allows ``current → target``."""
    return target in TRANSITIONS[current]
