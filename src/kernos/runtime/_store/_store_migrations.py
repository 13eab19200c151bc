"""The store's own tables as numbered migrations: the session turns (namespace ``runtime``) and
the usage rows (``usage``); :meth:`kernos.runtime._store._store.Store.migrate` runs them as the
store opens, and each subsystem registers its own tables the same way."""

from __future__ import annotations

Migration = tuple[int, str, str]
"""``(version, name, sql)``; versions start at 1 and increase by one."""


_RUNTIME_MIGRATIONS: list[Migration] = [
    (
        1,
        "turns",
        """
        CREATE TABLE turns (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            role TEXT NOT NULL,
            text TEXT NOT NULL DEFAULT '',
            tool_calls TEXT NOT NULL DEFAULT '[]',
            tool_results TEXT NOT NULL DEFAULT '[]',
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        );
        CREATE INDEX turns_session ON turns(session_id, id);
        """,
    ),
    (
        2,
        "sessions",
        # one row per top-level session (children are rows of the tasks table); the sessions
        # already in the store are all top-level ones: children recorded no turns before this
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            model TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL
        );
        INSERT INTO sessions (id, agent, model, created_at)
            SELECT session_id, MIN(agent), '', MIN(created_at) FROM turns GROUP BY session_id
        """,
    ),
    (
        3,
        "turn keys of durable runs",
        # a child run that DBOS resumes replays its completed part and records those turns
        # again: each carries a key that is the same on every replay (run epoch and ordinal),
        # so the store keeps the first; other turns have none (NULLs never collide)
        """
        ALTER TABLE turns ADD COLUMN run_key TEXT;
        CREATE UNIQUE INDEX turns_run_key ON turns(session_id, run_key)
        """,
    ),
]

#: the ``usage`` table (:mod:`kernos.runtime._session._usage_log`): one row per model response, its
#: own namespace, migrated as the store opens
USAGE_MIGRATIONS: list[Migration] = [
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
    (
        3,
        "tool calls the boundary repaired or rejected, per model",
        """
        CREATE TABLE usage_calls (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            model TEXT,
            tool TEXT,
            repaired INTEGER NOT NULL DEFAULT 0,
            rejected INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        );
        CREATE INDEX usage_calls_created ON usage_calls(created_at)
        """,
    ),
    (
        4,
        "call keys of durable runs",
        # a replayed durable run reports its repaired and rejected calls again: keyed as the
        # usage rows are (migration 2), so each is counted once
        """
        ALTER TABLE usage_calls ADD COLUMN run_key TEXT;
        CREATE UNIQUE INDEX usage_calls_run_key ON usage_calls(session_id, run_key)
        """,
    ),
]
