"""One child task as the scheduler and the manager hold it (:class:`TaskRecord`).

A plain type below the scheduler, the engines and the task tools, which all read it: none of
them imports another to name a record.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kernos.tasks._prompts import prompt_text
from kernos.tasks._state import Residency, TaskStatus

if TYPE_CHECKING:
    from kernos.runtime import Session
    from kernos.tasks._resolve import SpawnItem


@dataclass(eq=False)
class TaskRecord:
    """One child task as the manager holds it."""

    id: str
    parent: Session
    item: SpawnItem
    model_name: str
    depth: int
    background: bool
    session: Session | None = None
    status: TaskStatus = TaskStatus.PENDING
    residency: Residency = Residency.RESIDENT
    run_epoch: int = 1
    final_text: str = ""
    error: str | None = None
    missing_skills: list[str] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    runner: asyncio.Task[None] | None = None
    interrupt: bool = False
    end_as: TaskStatus | None = None  # set when the manager stops the child (cancelled / lost)
    #: the run stops in this process without ending: another executor resumes it (a worker
    #: stopped by SIGTERM/SIGINT with ``on_crash = "resume"``)
    leave: bool = False
    executor: str | None = None  # who runs it (``host:pid``) when not this process
    #: the current run's wall-clock budget: paused while it waits for a person (_approvals.py)
    deadline: asyncio.Timeout | None = None
    grants: list[str] = field(default_factory=list)
    #: a durable run (the DBOS engine): its transcript events carry keys ``EPOCH:N``, the same
    #: on every replay of the run, so a resumed run does not write its replayed part again;
    #: ``None``: unkeyed (the local engine)
    run_key: str | None = None
    events_keyed: int = 0  # how many events this run wrote under ``run_key``
    #: the key of each tool call of this run, by call id: its result's key is that key + "r"
    #: (parallel calls' results may come back in another order on a replay)
    calls_keyed: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str | None:
        return self.item.name

    @property
    def label(self) -> str:
        return self.item.label

    @property
    def duration(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.finished_at or time.time()) - self.started_at


def compaction_note(record: TaskRecord) -> str:
    """``compacted N×; M declared losses`` for a child whose session compacted (runtime/
    _compacting.py) in this process; ``""`` when it did not."""
    step = record.session.compacting if record.session is not None else None
    if step is None or not step.done:
        return ""
    losses = sum(c.losses for c in step.done)
    return prompt_text("compacted.md").format(count=len(step.done), losses=losses)
