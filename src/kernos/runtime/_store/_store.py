"""The durable store: one SQLite file (WAL, ``synchronous=NORMAL``) under the kernos home, or a
PostgreSQL database shared by many processes and hosts (``[store] url`` / ``KERNOS_STORE_URL``).

The SQL is written once for both; where they differ, :mod:`kernos.runtime._store._dialect` says how.

Each subsystem owns its tables and registers numbered migrations under its own namespace, so the
runtime never needs to know what a task is. Migrations run when the store opens, in order, each in
its own transaction; ``schema_migrations`` records what ran.

Writes off the hot path: :meth:`Store.write_later` (turns, task rows and events) buffers a write;
everything buffered during one turn of the event loop is committed in one transaction, on the
store's writer thread. A prompt that waits for its turns (:meth:`Store.flushed`) commits them on
its own thread instead when that needs no waiting (SQLite, no commit in flight, the write lock
free at once): the hand-over to the writer thread cost more than the commit. Whatever would wait
(another process holds the lock, PostgreSQL's round trip) stays on the writer thread. Order is
kept (one FIFO of batches, drained under one lock), a batch that fails stays queued ahead of newer
ones, and every read through the store's readers flushes first, so a reader never sees an older
state than a writer set.

Durability: a write is *acknowledged* once a flush that contains it has returned — the sync
:meth:`Store.flush`, or ``await`` :meth:`Store.flushed` (a session awaits it before its prompt
returns). An acknowledged write is in the WAL, in the operating system's hands: it survives the
process being killed (``kill -9``); with ``synchronous=NORMAL`` only a power loss or an OS crash
can still take the last commits. A write that was buffered and not yet acknowledged when the
process dies is lost.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernos.errors import StoreError as StoreError
from kernos.runtime._secrets import redact, register_secrets
from kernos.runtime._store._dialect import (
    PostgresDialect,
    Row,
    SqliteDialect,
    Write,
    display_url,
    is_postgres_url,
)
from kernos.runtime._store._store_errors import damaged, unopenable, unreachable
from kernos.runtime._store._store_migrations import _RUNTIME_MIGRATIONS, USAGE_MIGRATIONS
from kernos.runtime._store._store_migrations import Migration as Migration

if TYPE_CHECKING:
    import asyncio  # only a command that runs a loop loads it (start-up: `kernos tasks list`)

log = logging.getLogger("kernos.store")


_INSERT_TURN = (
    "INSERT INTO turns (session_id, agent, role, text, tool_calls, tool_results,"
    " input_tokens, output_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: a turn of a durable run: a key the session already holds is a replay of it, and kept once
_INSERT_KEYED_TURN = (
    "INSERT INTO turns (session_id, agent, role, text, tool_calls, tool_results,"
    " input_tokens, output_tokens, created_at, run_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id, run_key) DO NOTHING"
)

#: How long the loop waits before retrying writes a locked or failing store did not take.
RETRY_SECONDS = 0.5


def _tables(migrations: Sequence[Migration]) -> set[str]:
    """The tables a namespace's migrations leave behind (created and not dropped)."""
    tables: set[str] = set()
    for _, _, sql in sorted(migrations):
        for match in _TABLE_DDL.finditer(sql):
            verb, name = match.group(1).upper(), match.group(2)
            if verb == "CREATE":
                tables.add(name)
            else:
                tables.discard(name)
    return tables


_TABLE_DDL = re.compile(
    r"\b(CREATE|DROP)\s+TABLE\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?[\"`\[]?(\w+)", re.I
)


class Store:
    """A thread-safe handle on the store: a SQLite file, or a PostgreSQL database.

    Args:
        path: the database file, created ``0600``; its directory is created. ``":memory:"`` for
            tests of pure code. A ``postgresql://user:password@host:port/db`` URL for a
            PostgreSQL store (its password joins the secret scrubber and is never shown).
        timeout: how long a write waits for another process's lock, in seconds (and, on
            PostgreSQL, how long connecting may take).

    Raises:
        StoreError: the file or its directory cannot be created or opened, or it is not a kernos
            store (garbage, truncated, a directory, a table missing); the PostgreSQL server cannot
            be reached or refuses the connection.
    """

    def __init__(self, path: Path | str, *, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._lock = threading.RLock()
        self._buffer: list[Write] = []  # this loop turn's writes
        self._batches: deque[list[Write]] = deque()  # handed to the writer, oldest first
        self._writer = threading.Lock()  # held while draining _batches: one drain at a time
        # the loop a commit of the buffer is scheduled on (a loop that closed first does not count)
        self._scheduled: asyncio.AbstractEventLoop | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._dialect: SqliteDialect | PostgresDialect
        if isinstance(path, str) and is_postgres_url(path):
            self.path: Path | None = None
            self.url: str | None = display_url(path)
            self._open_postgres(path)
        else:
            self.path = Path(path) if str(path) != ":memory:" else None
            self.url = None
            self._open_sqlite()
        try:
            self._setup()
        except StoreError:
            self._conn.close()
            raise
        except self._dialect.Error as exc:
            self._conn.close()
            if self._dialect.is_damage(exc):
                raise damaged(self.path, exc) from None
            if isinstance(self._dialect, PostgresDialect) and self._dialect.is_unreachable(exc):
                raise unreachable(self._dialect, exc) from None
            if self.path is not None:
                raise unopenable(self.path, exc) from None
            raise

    def _open_sqlite(self) -> None:
        self._dialect = SqliteDialect(str(self.path or ":memory:"), self.timeout)
        if self.path is None:
            self._conn = self._dialect.connect()
            return
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._conn = self._dialect.connect()
        except (OSError, sqlite3.Error) as exc:
            raise unopenable(self.path, exc) from None

    def _open_postgres(self, url: str) -> None:
        from kernos.runtime._store._dialect import url_password

        register_secrets(*url_password(url))
        dialect = PostgresDialect(url, self.timeout)
        self._dialect = dialect
        try:
            self._conn = dialect.connect()
        except dialect.Error as exc:
            raise unreachable(dialect, exc) from None

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgres"``."""
        return self._dialect.name

    @property
    def where(self) -> str:
        """The file, or the URL without its password: what a person is shown."""
        return self._dialect.where

    def _setup(self) -> None:
        self._dialect.setup(self._conn)
        if "schema_migrations" not in self._dialect.tables(self._conn):
            with self.transaction() as conn:  # the writer's lock: concurrent opens wait
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " namespace TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,"
                    " applied_at REAL NOT NULL, PRIMARY KEY (namespace, version))",
                    ddl=True,
                )
        self.migrate("runtime", _RUNTIME_MIGRATIONS)
        self.migrate("usage", USAGE_MIGRATIONS)

    @classmethod
    def open(cls, home: Path, url: str | None = None) -> Store:
        """The store of a kernos home: the database at ``url`` when one is configured, else the
        SQLite file ``HOME/kernos.db``.

        Raises:
            StoreError: see :class:`Store`.
        """
        return cls(url) if url else cls(home / "kernos.db")

    def close(self) -> None:
        """Commit what is still buffered (a failure is logged: nothing more can be done), stop the
        writer thread and close the connection."""
        try:
            self.flush()
        except self._dialect.Error as exc:
            log.error("store: %d write(s) not committed at close: %s", self._pending(), exc)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        with self._lock:
            self._conn.close()

    def listen(self, channel: str, heard: Callable[[], None]) -> Callable[[], None] | None:
        """PostgreSQL: call ``heard()`` at each notification on ``channel`` (``pg_notify``,
        delivered when the transaction that sent it commits), from a connection and a thread of
        their own; returns what stops them (it wakes the thread: no wait for a timeout). SQLite
        has no notifications: ``None``, and the caller polls.

        Raises:
            psycopg.Error: the listening connection could not be opened.
        """
        if not isinstance(self._dialect, PostgresDialect):
            return None
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", channel):
            raise ValueError(f"not a channel name: {channel!r}")
        conn = self._dialect.connect()
        try:
            conn.execute(f"LISTEN {channel}")
        except BaseException:
            conn.close()
            raise
        stopping = threading.Event()

        def run() -> None:
            try:
                while not stopping.is_set():
                    for _ in conn.notifies(timeout=5.0, stop_after=1):
                        if not stopping.is_set():
                            heard()
            except Exception as exc:  # the caller's poll goes on without it
                if not stopping.is_set():
                    log.warning("store: stopped listening on %s: %s", channel, exc)
            finally:
                conn.close()

        thread = threading.Thread(target=run, name=f"kernos-listen-{channel}", daemon=True)
        thread.start()

        def stop() -> None:
            stopping.set()
            try:  # wakes the thread now, not at its timeout
                self.query("SELECT pg_notify(?, '')", (channel,))
            except Exception as exc:
                log.debug("store: could not wake the listener on %s: %s", channel, exc)
            thread.join(timeout=10.0)

        return stop

    def _connection(self) -> Any:
        """The open connection; a PostgreSQL connection that broke (server restart, network) is
        opened again, so the next retry of a kept batch can succeed."""
        if self._dialect.broken(self._conn):
            self._conn = self._dialect.connect()
        return self._conn

    def _versions_applied(self, namespace: str, conn: _Executor) -> set[int]:
        sql = "SELECT version FROM schema_migrations WHERE namespace = ?"
        return {row[0] for row in conn.execute(sql, (namespace,))}

    def migrate(self, namespace: str, migrations: Sequence[Migration]) -> list[int]:
        """Apply the migrations of ``namespace`` not applied yet; returns the versions applied.

        Safe when several processes open a fresh store at once: what is applied is read again
        inside each migration's write transaction (under the writer's lock: ``BEGIN IMMEDIATE``
        on SQLite, an advisory lock on PostgreSQL), so a version another process just applied is
        skipped, not run twice.

        Raises:
            StoreError: the file is damaged, or a table the migrations made is missing.
        """
        applied: list[int] = []
        with self._lock, self._translated():
            # the common case: nothing to do, no write lock
            done = self._versions_applied(namespace, _Executor(self._connection(), self._dialect))
            for version, name, sql in sorted(migrations):
                if version in done:
                    continue
                with self.transaction() as conn:
                    if version in self._versions_applied(namespace, conn):
                        continue  # another process applied it meanwhile
                    for statement in _split_sql(sql):
                        conn.execute(statement, ddl=True)
                    conn.execute(
                        "INSERT INTO schema_migrations VALUES (?, ?, ?, ?)",
                        (namespace, version, name, time.time()),
                    )
                applied.append(version)
            self._check_tables(namespace, migrations)
        return applied

    def _check_tables(self, namespace: str, migrations: Sequence[Migration]) -> None:
        expected = _tables(migrations)
        if not expected:
            return
        missing = sorted(expected - self._dialect.tables(self._connection()))
        if missing:
            raise StoreError(
                self.path or self.where,
                f"the {namespace} table {missing[0]} is missing although its migration is "
                f"recorded (the {self._dialect.thing} was changed outside kernos)",
                self._dialect.fresh_start,
            )

    def versions(self, namespace: str) -> list[int]:
        return [
            row[0]
            for row in self.query(
                "SELECT version FROM schema_migrations WHERE namespace = ? ORDER BY version",
                (namespace,),
            )
        ]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement now, after every buffered write; returns ``lastrowid`` (SQLite;
        0 on PostgreSQL, which has no rowid)."""
        self.flush()
        with self._lock, self._translated():
            dialect = self._dialect
            cursor = self._connection().execute(dialect.sql(sql), dialect.params(params))
            return dialect.lastrowid(cursor)

    def write_now(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run one write statement now, after every buffered write, as a transaction of its own;
        returns the rows of its ``RETURNING`` clause (``[]`` without one).

        It does not take the writer's lock: one statement is atomic on both databases, and a
        conditional ``UPDATE … WHERE`` is decided on the row it changes (SQLite writes one
        statement at a time; PostgreSQL makes a second writer of the row wait for the first and
        then checks the ``WHERE`` again on the row the first left). So a claim made this way is
        won exactly once, and it never waits for the batches of the database's other writers.
        """
        self.flush()
        with self._lock, self._translated():
            dialect = self._dialect
            cursor = self._connection().execute(dialect.sql(sql), dialect.params(params))
            return list(cursor) if cursor.description else []

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Rows by position, by column name and as ``dict(row)``."""
        with self._lock, self._translated():
            dialect = self._dialect
            return list(self._connection().execute(dialect.sql(sql), dialect.params(params)))

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """A file found damaged mid-use is a :class:`StoreError`; SQL mistakes stay as they are."""
        try:
            yield
        except self._dialect.DatabaseError as exc:
            if self._dialect.is_damage(exc):
                raise damaged(self.path, exc) from None
            raise

    @contextmanager
    def transaction(self) -> Iterator[_Executor]:
        """One write transaction under the writer's lock (``BEGIN IMMEDIATE`` on SQLite, an
        advisory lock on PostgreSQL) … ``COMMIT`` (``ROLLBACK`` on error), holding the store's
        lock. The executor it yields takes the store's ``?`` SQL."""
        with self._lock:
            conn = self._connection()
            try:
                self._dialect.begin(conn)  # may fail half-way on PostgreSQL (the lock timed out)
                yield _Executor(conn, self._dialect)
            except BaseException:
                self._dialect.rollback(conn)
                raise
            conn.execute("COMMIT")

    # -- buffered writes -----------------------------------------------------------------------
    def write_later(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Buffer one write: on a running event loop it is committed with the rest of this loop
        turn's writes, on the writer thread; with no loop running it is committed now.

        Raises:
            sqlite3.Error | psycopg.Error: (no loop running only) the store did not take it; it
                stays buffered.
        """
        import asyncio

        self._buffer.append((sql, params))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if self._scheduled is not loop:
            self._scheduled = loop
            loop.call_soon(self._kick, loop)

    def flush(self) -> None:
        """Commit every buffered write now (on the calling thread), after any batch the writer
        thread is still committing.

        A write that can never be stored (a constraint it breaks, a value the database refuses) is
        dropped and logged on its own; the other writes of the same flush still commit. When the
        transaction itself fails (the store is locked, closed or full) nothing is lost: every
        write stays buffered, ahead of newer ones, for the next flush, and the error is raised.
        """
        self._hand_over()
        if self._batches:
            self._drain()

    async def flushed(self) -> None:
        """Wait until every write buffered so far is committed (acknowledged): here when the
        store's lock is free at once (:meth:`_commit_in_place`), else on the writer thread.

        Raises:
            sqlite3.Error | psycopg.Error: the transaction failed; the writes stay buffered for
                the next flush.
        """
        import asyncio

        self._hand_over()
        if self._batches and not self._commit_in_place():
            await asyncio.get_running_loop().run_in_executor(self._thread(), self._drain)

    def _commit_in_place(self) -> bool:
        """Commit the queued batches on the calling thread (the event loop's) when that needs no
        waiting: a dialect that can (SQLite), the writer thread idle and the database's write
        lock free at once. Whether it did; anything that would wait (another process holds the
        lock, a commit in flight) is left to the writer thread. The hand-over to that thread was
        most of what a prompt's commit cost (``bench/engine.py``)."""
        if not self._dialect.commits_in_place or not self._writer.acquire(blocking=False):
            return False
        try:
            if not self._lock.acquire(blocking=False):
                return False
            try:
                count = len(self._batches)
                writes = [write for batch in list(self._batches)[:count] for write in batch]
                with self._translated():
                    dropped = self._dialect.commit_if_free(self._connection(), writes)
            finally:
                self._lock.release()
            if dropped is None:
                return False
            self._committed(count, dropped)
            return True
        finally:
            self._writer.release()

    def _pending(self) -> int:
        return len(self._buffer) + sum(len(batch) for batch in self._batches)

    def _hand_over(self) -> None:
        if self._buffer:
            self._batches.append(self._buffer)
            self._buffer = []

    def _thread(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="kernos-store")
        return self._executor

    def _kick(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop turn ended: hand its writes to the writer thread."""
        self._scheduled = None
        self._hand_over()
        if not self._batches:
            return
        done = loop.run_in_executor(self._thread(), self._drain)
        done.add_done_callback(lambda future: self._drained(future, loop))

    def _drained(self, future: asyncio.Future[None], loop: asyncio.AbstractEventLoop) -> None:
        """A store that could not take the writes (locked, full) keeps them and tries again
        shortly instead of raising into the event loop."""
        if future.cancelled() or future.exception() is None:
            return
        log.warning("store: %d write(s) kept for a retry: %s", self._pending(), future.exception())
        if self._scheduled is not loop and not loop.is_closed():
            self._scheduled = loop
            loop.call_later(RETRY_SECONDS, self._kick, loop)

    def _drain(self) -> None:
        """Commit every queued batch, in order, in one transaction (a group commit: batches
        queued while the previous commit ran go together); when it fails they all stay queued,
        ahead of newer ones, and the error is raised."""
        with self._writer:
            count = len(self._batches)
            if not count:
                return
            writes = [write for batch in list(self._batches)[:count] for write in batch]
            with self._translated(), self._lock:
                dropped = self._dialect.commit_batch(self._connection(), writes)
            self._committed(count, dropped)

    def _committed(self, count: int, dropped: list[tuple[str, BaseException]]) -> None:
        """The first ``count`` batches are committed: off the queue; each write dropped logged."""
        for _ in range(count):
            self._batches.popleft()
        for sql, exc in dropped:
            log.error("store: dropped a write that cannot be stored (%s): %s", exc, sql)

    # -- turns -------------------------------------------------------------------------------
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
        key: str | None = None,
    ) -> None:
        """Append one conversation turn (secrets redacted); buffered (:meth:`write_later`).

        ``key``: the turn's place in a durable run (the same on every replay of the run); a
        turn whose key the session already has is not recorded again."""
        values = (
            session_id,
            agent,
            role,
            redact(text),
            _json_list(tool_calls),
            _json_list(tool_results),
            input_tokens,
            output_tokens,
            time.time(),
        )
        if key is None:
            self.write_later(_INSERT_TURN, values)
        else:
            self.write_later(_INSERT_KEYED_TURN, (*values, key))

    def turns(self, session_id: str) -> list[dict[str, Any]]:
        self.flush()
        rows = self.query("SELECT * FROM turns WHERE session_id = ? ORDER BY id", (session_id,))
        out = []
        for row in rows:
            item = dict(row)
            item["tool_calls"] = json.loads(item["tool_calls"])
            item["tool_results"] = json.loads(item["tool_results"])
            out.append(item)
        return out


def _json_list(items: Sequence[dict[str, Any]]) -> str:
    """A turn's calls or results as stored: JSON, secrets redacted (most turns have none)."""
    if not items:
        return "[]"
    return json.dumps(redact(list(items)), ensure_ascii=False, default=str)


class _Executor:
    """A transaction's connection that takes the store's SQL (``?`` placeholders)."""

    def __init__(self, conn: Any, dialect: SqliteDialect | PostgresDialect) -> None:
        self.conn = conn
        self._dialect = dialect

    def execute(self, sql: str, params: Sequence[Any] = (), *, ddl: bool = False) -> Any:
        """Run one statement; ``ddl`` translates a migration's column types as well."""
        dialect = self._dialect
        text = dialect.sql(dialect.ddl(sql) if ddl else sql)
        return self.conn.execute(text, dialect.params(params))


def _split_sql(sql: str) -> list[str]:
    return [part.strip() for part in sql.split(";") if part.strip()]
