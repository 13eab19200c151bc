"""The task store's tables (migration namespace ``tasks``) and the SQL its writers share."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kernos.tasks._state import ACTIVE

MIGRATIONS = [
    (
        1,
        "tasks and task events",
        """
        CREATE TABLE tasks (
            id TEXT PRIMARY KEY,
            parent_session TEXT NOT NULL,
            child_session TEXT,
            depth INTEGER NOT NULL DEFAULT 1,
            name TEXT,
            summary TEXT,
            description TEXT,
            label TEXT NOT NULL DEFAULT '',
            prompt TEXT NOT NULL DEFAULT '',
            target_kind TEXT NOT NULL,
            target TEXT NOT NULL,
            model TEXT NOT NULL,
            background INTEGER NOT NULL DEFAULT 0,
            status TEXT NOT NULL,
            residency TEXT NOT NULL,
            run_epoch INTEGER NOT NULL DEFAULT 1,
            owner_pid INTEGER,
            final_text TEXT,
            error TEXT,
            created_at REAL NOT NULL,
            started_at REAL,
            finished_at REAL,
            updated_at REAL NOT NULL
        );
        CREATE INDEX tasks_parent ON tasks(parent_session);
        CREATE INDEX tasks_status ON tasks(status);
        CREATE TABLE task_events (
            task_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            type TEXT NOT NULL,
            payload TEXT NOT NULL DEFAULT '{}',
            created_at REAL NOT NULL,
            PRIMARY KEY (task_id, seq)
        )
        """,
    ),
    (
        2,
        "owner start time and cancel requests",
        """
        ALTER TABLE tasks ADD COLUMN owner_started TEXT;
        ALTER TABLE tasks ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0
        """,
    ),
    (
        3,
        "the tools a child was granted",
        # a JSON list of tool names, so a later run can rebuild the child with the same tools
        """
        ALTER TABLE tasks ADD COLUMN tools TEXT
        """,
    ),
    (
        4,
        "executors: who runs each task, heartbeats, notice claims",
        """
        ALTER TABLE tasks ADD COLUMN executor TEXT;
        ALTER TABLE tasks ADD COLUMN engine TEXT NOT NULL DEFAULT 'local';
        ALTER TABLE tasks ADD COLUMN grants TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE tasks ADD COLUMN notified_epoch INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE task_executors (
            id TEXT PRIMARY KEY,
            beat_at REAL NOT NULL,
            started_at REAL NOT NULL
        );
        CREATE TABLE task_leases (
            name TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            until REAL NOT NULL
        )
        """,
    ),
    (
        5,
        "event keys of durable runs",
        # a child run that DBOS resumes replays its completed part and writes those events
        # again: each carries a key that is the same on every replay (run epoch and ordinal),
        # so the store keeps the first; other events have none (NULLs never collide)
        """
        ALTER TABLE task_events ADD COLUMN run_key TEXT;
        CREATE UNIQUE INDEX task_events_run_key ON task_events(task_id, run_key)
        """,
    ),
    (
        6,
        "a durable inbox and interrupt requests of durable runs",
        # task_send to an active child on the DBOS engine: the message waits here until the
        # run that executes the child (in any process) takes it after a prompt; ``taken_by``
        # is that take's key (run epoch and the take's ordinal), so a replayed run takes the
        # same batch again. ``interrupt_epoch``: the run asked to stop after its current step
        """
        CREATE TABLE task_inbox (
            task_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            message TEXT NOT NULL,
            taken_by TEXT,
            created_at REAL NOT NULL,
            PRIMARY KEY (task_id, seq)
        );
        ALTER TABLE tasks ADD COLUMN interrupt_epoch INTEGER NOT NULL DEFAULT 0
        """,
    ),
    (
        7,
        "the queues each executor serves",
        # a JSON list of DBOS queue names; NULL: every queue (what an executor written before
        # this column served). The reaper splits each queue's limit among the live executors
        # that serve it, so a burst of children spreads over the fleet
        """
        ALTER TABLE task_executors ADD COLUMN queues TEXT
        """,
    ),
    (
        8,
        "send keys of durable runs",
        # a task_send from a durable run commits its message before DBOS records the step: a
        # run resumed after a crash there sends it again, under the same key (the calling
        # step's workflow and step id), and the inbox keeps the first; sends outside a durable
        # run have none (NULLs never collide)
        """
        ALTER TABLE task_inbox ADD COLUMN send_key TEXT;
        CREATE UNIQUE INDEX task_inbox_send_key ON task_inbox(task_id, send_key)
        """,
    ),
    (
        9,
        "the application version each executor runs",
        # DBOS runs only the workflows of its own application version: after an upgrade, the
        # reaper ends ``lost`` a child whose workflow is of a version no live executor runs
        # (it would wait forever). NULL: an executor written before this column, which may
        # run any version
        """
        ALTER TABLE task_executors ADD COLUMN app_version TEXT
        """,
    ),
]

_COLUMNS = frozenset(
    {
        "id", "parent_session", "child_session", "depth", "name", "summary", "description",
        "label", "prompt", "target_kind", "target", "model", "background", "status", "residency",
        "run_epoch", "owner_pid", "owner_started", "final_text", "error", "created_at",
        "started_at", "finished_at", "updated_at", "cancel_requested", "tools", "executor",
        "engine", "grants", "notified_epoch", "interrupt_epoch",
    }
)  # fmt: skip


_STILL_ACTIVE = " AND status IN (" + ", ".join(f"'{s}'" for s in sorted(ACTIVE)) + ")"

_INSERT_EVENT = (
    "INSERT INTO task_events (task_id, seq, type, payload, created_at) "
    "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ? FROM task_events WHERE task_id = ?"
)
#: an event of a durable run: a key the task already has is a replay of it, and kept once
_INSERT_KEYED_EVENT = (
    "INSERT INTO task_events (task_id, seq, type, payload, created_at, run_key) "
    "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ?, ? FROM task_events WHERE task_id = ? "
    "ON CONFLICT (task_id, run_key) DO NOTHING"
)

#: ids per query of :meth:`TaskStore.rows` (well below either database's parameter limit)
_ROWS_AT_ONCE = 500


def id_chunks(ids: Sequence[str]) -> Iterator[tuple[list[str], str]]:
    """``ids`` in chunks of at most :data:`_ROWS_AT_ONCE`, one query each, with the chunk's
    ``?, ?, …`` placeholders for its ``IN (…)``."""
    for start in range(0, len(ids), _ROWS_AT_ONCE):
        chunk = list(ids[start : start + _ROWS_AT_ONCE])
        yield chunk, ", ".join("?" * len(chunk))


#: the PostgreSQL channel a task's status change is announced on (its id), when it commits
STATUS_CHANNEL = "kernos_task_status"
