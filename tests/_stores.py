"""Look at a store from outside, as another process would, on SQLite or PostgreSQL alike.

A *target* is what a test opens :class:`kernos.runtime.Store` on: a SQLite file path or a
``postgresql://`` URL (the ``store_target`` fixture gives one of each).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from kernos.runtime._store._dialect import ADVISORY_KEY

#: what a write raises while another connection holds the writer's lock past the timeout
LOCKED = (sqlite3.OperationalError, psycopg.errors.LockNotAvailable)
LOCKED_MATCH = "locked|lock timeout"
#: what a migration with a SQL mistake raises
SQL_MISTAKE = (sqlite3.OperationalError, psycopg.ProgrammingError)


def is_postgres(target: str) -> bool:
    return target.startswith("postgresql://")


def other_query(target: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run ``sql`` (``?`` placeholders) on a connection of its own."""
    if is_postgres(target):
        with psycopg.connect(target) as conn:
            return list(conn.execute(sql.replace("?", "%s"), tuple(params)).fetchall())
    with contextlib.closing(sqlite3.connect(target)) as conn:
        return list(conn.execute(sql, tuple(params)).fetchall())


def count_turns(target: str, session_id: str) -> int:
    ((n,),) = other_query(target, "SELECT COUNT(*) FROM turns WHERE session_id = ?", (session_id,))
    return int(n)


def table_names(target: str) -> set[str]:
    if is_postgres(target):
        sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    return {row[0] for row in other_query(target, sql)}


@contextlib.contextmanager
def writer_lock_held(target: str) -> Iterator[None]:
    """Another process holds the store's write lock (SQLite's, or kernos's advisory lock)."""
    if is_postgres(target):
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_KEY,))
            yield
            conn.execute("ROLLBACK")
        return
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def traced(store: Any) -> list[tuple[str, int]]:
    """Every statement the store's connection runs, with the thread that ran it."""
    import threading

    seen: list[tuple[str, int]] = []
    conn = store._conn
    if isinstance(conn, sqlite3.Connection):
        conn.set_trace_callback(lambda sql: seen.append((sql, threading.get_ident())))
        return seen
    execute = conn.execute

    def tracing(query: Any, params: Any = None, **kwargs: Any) -> Any:
        seen.append((str(query), threading.get_ident()))
        return execute(query, params, **kwargs)

    conn.execute = tracing
    return seen
