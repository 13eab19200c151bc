"""The durable store: one SQLite file (WAL) under the kernos home.

Each subsystem owns its tables and registers numbered migrations under its own namespace, so the
runtime never needs to know what a task is. Migrations run when the store opens, in order, each in
its own transaction; ``schema_migrations`` records what ran.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernos.runtime._secrets import scrub_text

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
]

_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|authorization|passwd)", re.I)


def redact(value: Any) -> Any:
    """Replace secret values with ``[redacted]``: a value under a secret-looking key, and every
    secret the one scrubber knows by value or by shape (:func:`kernos.runtime.scrub_text`)."""
    if isinstance(value, dict):
        return {
            k: "[redacted]" if isinstance(k, str) and _SECRET_KEY.search(k) else redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return scrub_text(value)
    return value


class Store:
    """A thread-safe handle on the SQLite store.

    Args:
        path: the database file; its directory is created. ``":memory:"`` for tests of pure code.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path) if str(path) != ":memory:" else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=30.0
        )
        self._conn.row_factory = sqlite3.Row
        if self.path is not None:
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA busy_timeout=30000")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " namespace TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,"
            " applied_at REAL NOT NULL, PRIMARY KEY (namespace, version))"
        )
        self.migrate("runtime", _RUNTIME_MIGRATIONS)

    @classmethod
    def open(cls, home: Path) -> Store:
        """The store of a kernos home: ``HOME/kernos.db``."""
        return cls(home / "kernos.db")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def migrate(self, namespace: str, migrations: Sequence[Migration]) -> list[int]:
        """Apply the migrations of ``namespace`` not applied yet; returns the versions applied."""
        applied: list[int] = []
        with self._lock:
            done = {
                row[0]
                for row in self._conn.execute(
                    "SELECT version FROM schema_migrations WHERE namespace = ?", (namespace,)
                )
            }
            for version, name, sql in sorted(migrations):
                if version in done:
                    continue
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _split_sql(sql):
                        self._conn.execute(statement)
                    self._conn.execute(
                        "INSERT INTO schema_migrations VALUES (?, ?, ?, ?)",
                        (namespace, version, name, time.time()),
                    )
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                applied.append(version)
        return applied

    def versions(self, namespace: str) -> list[int]:
        return [
            row[0]
            for row in self.query(
                "SELECT version FROM schema_migrations WHERE namespace = ? ORDER BY version",
                (namespace,),
            )
        ]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; returns ``lastrowid``."""
        with self._lock:
            cursor = self._conn.execute(sql, tuple(params))
            return cursor.lastrowid or 0

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return list(self._conn.execute(sql, tuple(params)))

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error), holding the store's lock."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def record_turn(
        self,
        session_id: str,
        agent: str,
        role: str,
        text: str = "",
        tool_calls: Sequence[dict[str, Any]] = (),
        tool_results: Sequence[dict[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> None:
        """Append one conversation turn (secrets redacted)."""
        self.execute(
            "INSERT INTO turns (session_id, agent, role, text, tool_calls, tool_results,"
            " input_tokens, output_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session_id,
                agent,
                role,
                redact(text),
                json.dumps(redact(list(tool_calls)), ensure_ascii=False, default=str),
                json.dumps(redact(list(tool_results)), ensure_ascii=False, default=str),
                input_tokens,
                output_tokens,
                time.time(),
            ),
        )

    def turns(self, session_id: str) -> list[dict[str, Any]]:
        rows = self.query("SELECT * FROM turns WHERE session_id = ? ORDER BY id", (session_id,))
        out = []
        for row in rows:
            item = dict(row)
            item["tool_calls"] = json.loads(item["tool_calls"])
            item["tool_results"] = json.loads(item["tool_results"])
            out.append(item)
        return out


def _split_sql(sql: str) -> list[str]:
    return [part.strip() for part in sql.split(";") if part.strip()]
