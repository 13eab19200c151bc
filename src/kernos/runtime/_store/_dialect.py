"""Where the store's SQL dialects differ: SQLite (the default file) and PostgreSQL.

The store's SQL is written once, in the subset both accept (``?`` placeholders, ``TEXT``,
``INTEGER``, ``REAL``, ``INTEGER PRIMARY KEY`` for an id the database assigns). Everything that
differs sits in one of the two dialect objects below, so :class:`kernos.runtime.Store` has no
``if postgres`` anywhere. SQLite → PostgreSQL:

- placeholders: ``?`` → ``%s`` (and ``%`` doubled);
- migration types: ``REAL`` → ``DOUBLE PRECISION`` (a ``time.time()`` in PostgreSQL's 4-byte REAL
  is off by minutes), ``INTEGER`` → ``BIGINT`` (SQLite's integers are 64-bit), ``INTEGER PRIMARY
  KEY`` → an identity column (both assign it when an INSERT leaves it out);
- the one-writer lock: ``BEGIN IMMEDIATE`` → ``BEGIN`` plus a transaction-scoped advisory lock
  (one fixed key), so writers, migrations and event numbering serialize the same way;
- a batch of buffered writes: on PostgreSQL the lock and every write go to the server as one
  multi-statement query (bound by psycopg's client-side binding) between ``BEGIN`` and
  ``COMMIT``, so the lock is held across one round trip to this process, not one per statement;
- a write that cannot be stored: SQLite undoes just that statement (statement-level ABORT);
  PostgreSQL aborts the transaction, so the batch is redone with one savepoint per statement;
- waiting for the lock: ``busy_timeout`` → ``lock_timeout``; a transaction left idle that long
  (its client gone without a word) is ended by the server (``idle_in_transaction_session_timeout``);
- the list of tables: ``sqlite_master`` → ``information_schema.tables``.

psycopg (PostgreSQL's driver) is imported only by :class:`PostgresDialect`, i.e. only when a
PostgreSQL URL is configured.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

Write = tuple[str, Sequence[Any]]
"""``(sql, params)``: one buffered statement."""

POSTGRES_SCHEMES = ("postgresql", "postgres")

#: the advisory lock every kernos writer on one PostgreSQL database takes (any fixed 64-bit key)
ADVISORY_KEY = 0x6B65726E6F73  # "kernos"


class Row(tuple[Any, ...]):
    """A result row: by position (``row[0]``), by column name (``row["id"]``) and ``dict(row)``,
    the same from both databases."""

    _index: dict[str, int]

    def __new__(cls, index: dict[str, int], values: Sequence[Any]) -> Row:
        row = super().__new__(cls, values)
        row._index = index
        return row

    def keys(self) -> list[str]:
        return list(self._index)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)


def _column_index(names: Sequence[str]) -> dict[str, int]:
    return {name: i for i, name in enumerate(names)}


def _encodable(value: Any, nul: bool = False) -> Any:
    """``value`` with lone surrogates replaced by U+FFFD (pairs are joined), and with ``nul``
    NUL characters too (PostgreSQL text cannot hold them)."""
    if isinstance(value, str):
        value = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value.replace("\x00", "\ufffd") if nul else value
    return value


def _apply_committed(
    dialect: SqliteDialect | PostgresDialect,
    conn: Any,
    writes: Sequence[Write],
    *,
    begun: bool = False,
) -> list[tuple[str, BaseException]]:
    """``writes`` applied one by one (:meth:`SqliteDialect.apply`) in one transaction (``begun``:
    already open), committed; rolled back whole when it fails. The ``(sql, error)`` of each write
    dropped."""
    if not begun:
        dialect.begin(conn)
    try:
        dropped = dialect.apply(conn, writes)
        conn.execute("COMMIT")
    except BaseException:
        dialect.rollback(conn)
        raise
    return dropped


def display_url(url: str) -> str:
    """``url`` without its password (what ``kernos -v`` and error messages show)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        if parts.port is not None:
            host = f"{host}:{parts.port}"
    except ValueError:  # a port that is not a number: hide whatever sits between : and @
        return re.sub(r"(//[^/:@]*):[^@/]*@", r"\1@", url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


def url_password(url: str) -> list[str]:
    """The password of ``url`` as written and decoded (both are secrets for the scrubber)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return []
    return [password, unquote(password)] if password else []


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL store (``postgresql://``, ``postgres://``, any case)."""
    scheme, sep, _ = url.strip().partition("://")
    return bool(sep) and scheme.lower() in POSTGRES_SCHEMES


class SqliteDialect:
    """The default store: one SQLite file, WAL, ``synchronous=NORMAL``."""

    name = "sqlite"
    thing = "file"
    fresh_start = "move the file aside and run again to start a fresh store"
    Error: type[Exception] = sqlite3.Error
    DatabaseError: type[Exception] = sqlite3.DatabaseError
    #: errors of one statement that retrying cannot fix; the rest of the flush goes on without it
    write_errors: tuple[type[BaseException], ...] = (
        sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError,
        sqlite3.DataError, OverflowError, ValueError,
    )  # fmt: skip

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self.where = path

    def connect(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            _created_private(self.path)
        conn = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=self.timeout
        )
        conn.row_factory = _sqlite_row
        return conn

    def setup(self, conn: Any) -> None:
        conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        if self.path != ":memory:":
            self._wal(conn)
            # in WAL mode a commit survives the process being killed; fsync at checkpoints only
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")

    def _wal(self, conn: Any) -> None:
        # Switching to WAL takes an exclusive lock without SQLite's busy handler: when several
        # processes open a fresh store at once, the losers see "database is locked". Wait it out.
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if not self.is_busy(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(0.01)

    def broken(self, conn: Any) -> bool:
        return False

    def sql(self, sql: str) -> str:
        return sql

    def ddl(self, sql: str) -> str:
        return sql

    def params(self, params: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(params)

    def begin(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def rollback(self, conn: Any) -> None:
        """End the open transaction, if there is one (a BEGIN that failed opened none)."""
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def lastrowid(self, cursor: Any) -> int:
        return int(cursor.lastrowid or 0)

    def tables(self, conn: Any) -> set[str]:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {row[0] for row in rows}

    def apply(self, conn: Any, writes: Sequence[Write]) -> list[tuple[str, BaseException]]:
        """Run ``writes`` in the open transaction; returns ``(sql, error)`` for each one dropped.

        A failing statement undoes only itself (SQLite's statement-level ABORT), so the
        transaction stays usable. Text SQLite cannot encode (a lone surrogate a model sent) is
        stored cleaned.
        """
        dropped: list[tuple[str, BaseException]] = []
        for sql, params in writes:
            try:
                _execute_clean(conn, sql, params, self.params, nul=False)
            except self.write_errors as exc:
                dropped.append((sql, exc))
        return dropped

    def commit_batch(self, conn: Any, writes: Sequence[Write]) -> list[tuple[str, BaseException]]:
        """Commit ``writes`` in one write transaction; returns ``(sql, error)`` for each one
        dropped (see :meth:`apply`).

        Raises:
            sqlite3.Error: the transaction failed (the store is locked, closed or full); nothing
                of it is stored.
        """
        return _apply_committed(self, conn, writes)

    #: a prompt's writes may be committed on the event loop's thread when the lock is free
    commits_in_place = True

    def commit_if_free(
        self, conn: Any, writes: Sequence[Write]
    ) -> list[tuple[str, BaseException]] | None:
        """:meth:`commit_batch`, only if the write lock is free at once (no busy wait); ``None``,
        with nothing done, when another connection holds it."""
        conn.execute("PRAGMA busy_timeout=0")
        try:
            self.begin(conn)
        except sqlite3.OperationalError as exc:
            if self.is_busy(exc):
                return None
            raise
        finally:
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        return _apply_committed(self, conn, writes, begun=True)

    _BUSY = ("database is locked", "database table is locked", "database is busy")

    def is_busy(self, exc: BaseException) -> bool:
        """A lock worth waiting out (another process is creating or migrating the same store)."""
        return isinstance(exc, sqlite3.OperationalError) and any(b in str(exc) for b in self._BUSY)

    def is_damage(self, exc: BaseException) -> bool:
        """A file that is not (or no longer) a SQLite database; plain SQL mistakes are not."""
        return type(exc) is sqlite3.DatabaseError or (
            isinstance(exc, sqlite3.DatabaseError) and "malformed" in str(exc)
        )


def _sqlite_row(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> Row:
    return Row(_column_index([d[0] for d in cursor.description]), values)


def _created_private(path: str) -> None:
    """Create the database file ``0600`` before SQLite does (its ``-wal``/``-shm`` files copy
    the database's mode); an existing file readable by others is made private."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        return
    if stat.S_ISREG(mode) and mode & 0o077:
        with contextlib.suppress(OSError):  # not ours to change: leave it as it is
            os.chmod(path, stat.S_IMODE(mode) & 0o600)


def _execute_clean(
    conn: Any,
    sql: str,
    params: Sequence[Any],
    convert: Callable[[Sequence[Any]], tuple[Any, ...]],
    *,
    nul: bool,
) -> None:
    """Execute one write; text the driver cannot encode is stored cleaned (U+FFFD)."""
    try:
        conn.execute(sql, convert(params))
    except Exception as exc:  # both are raised before anything reaches the database
        if isinstance(exc, UnicodeEncodeError) or (nul and "cannot contain NUL" in str(exc)):
            conn.execute(sql, convert([_encodable(p, nul) for p in params]))
        else:
            raise


def _bound(cursor: Any, sql: str, params: tuple[Any, ...]) -> str:
    """``sql`` with ``params`` bound as literals (psycopg's quoting); text PostgreSQL cannot hold
    (a lone surrogate, a NUL) bound cleaned (U+FFFD), as :func:`_execute_clean` stores it."""
    try:
        return str(cursor.mogrify(sql, params))
    except Exception as exc:  # raised while quoting, before anything reaches the database
        if isinstance(exc, UnicodeEncodeError) or "cannot contain NUL" in str(exc):
            return str(cursor.mogrify(sql, tuple(_encodable(p, True) for p in params)))
        raise


_PG_TYPES = re.compile(
    r"\bINTEGER\s+PRIMARY\s+KEY(?:\s+AUTOINCREMENT)?\b|\bINTEGER\b|\bREAL\b", re.I
)


def _pg_type(match: re.Match[str]) -> str:
    word = match.group(0).upper()
    if word.startswith("INTEGER") and "PRIMARY" in word:
        # SQLite assigns an INTEGER PRIMARY KEY left out of an INSERT; so does an identity column
        return "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"
    # SQLite's INTEGER is 64-bit and its REAL a double; PostgreSQL's are 32-bit and a float4
    # (a time.time() in a float4 is off by minutes)
    return "BIGINT" if word == "INTEGER" else "DOUBLE PRECISION"


def _pg_ddl(sql: str) -> str:
    """A migration's SQLite column types as their PostgreSQL equivalents."""
    return _PG_TYPES.sub(_pg_type, sql)


@functools.lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s``, ``%`` doubled; quoted text is left alone
    (except ``%``, which psycopg reads everywhere)."""
    out: list[str] = []
    quote: str | None = None
    for char in sql:
        if char == "%":
            out.append("%%")
        elif quote is not None:
            out.append(char)
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
            out.append(char)
        elif char == "?":
            out.append("%s")
        else:
            out.append(char)
    return "".join(out)


class PostgresDialect:
    """A PostgreSQL database (``postgresql://user:password@host:port/db``), shared by every
    process and host that names it."""

    name = "postgres"
    thing = "database"
    #: every commit waits on the server: the writer thread makes them all
    commits_in_place = False
    fresh_start = "point the URL at a new, empty database (or drop and re-create this one)"

    def __init__(self, url: str, timeout: float) -> None:
        import psycopg

        self.psycopg = psycopg
        self.url = url
        self.timeout = timeout
        self.where = display_url(url)
        self.Error: type[Exception] = psycopg.Error
        self.DatabaseError: type[Exception] = psycopg.DatabaseError
        self.write_errors: tuple[type[BaseException], ...] = (
            psycopg.IntegrityError, psycopg.DataError, OverflowError, ValueError,
        )  # fmt: skip

    def connect(self) -> Any:
        return self.psycopg.connect(
            self.url,
            autocommit=True,  # transactions are explicit, as on SQLite (isolation_level=None)
            connect_timeout=max(1, int(self.timeout)),
            # a client gone mid-transaction (a cut link: no FIN reaches the server) would hold
            # the writer's lock and its rows until TCP gives up, hours later; the server ends a
            # transaction left idle as long as another writer would wait for its lock
            options=f"-c lock_timeout={int(self.timeout * 1000)} "
            f"-c idle_in_transaction_session_timeout={int(self.timeout * 1000)}",
            row_factory=_pg_rows,
            application_name="kernos",
        )

    def setup(self, conn: Any) -> None:
        return None

    def broken(self, conn: Any) -> bool:
        return bool(conn.closed or conn.broken)

    def sql(self, sql: str) -> str:
        return _pg_sql(sql)

    def ddl(self, sql: str) -> str:
        return _pg_ddl(sql)

    def params(self, params: Sequence[Any]) -> tuple[Any, ...]:
        # a Python bool would be sent as a boolean, which an INTEGER column refuses
        return tuple(int(p) if isinstance(p, bool) else p for p in params)

    def begin(self, conn: Any) -> None:
        conn.execute("BEGIN")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_KEY,))

    def rollback(self, conn: Any) -> None:
        """End the open transaction, if there is one and the connection still works."""
        idle = self.psycopg.pq.TransactionStatus.IDLE
        if not self.broken(conn) and conn.info.transaction_status != idle:
            conn.execute("ROLLBACK")

    def lastrowid(self, cursor: Any) -> int:
        return 0  # PostgreSQL has no rowid; nothing in kernos reads it

    def tables(self, conn: Any) -> set[str]:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
        return {row[0] for row in rows}

    def commit_if_free(
        self, conn: Any, writes: Sequence[Write]
    ) -> list[tuple[str, BaseException]] | None:
        """Never in place (see :attr:`commits_in_place`): ``None``, nothing done."""
        return None

    def commit_batch(self, conn: Any, writes: Sequence[Write]) -> list[tuple[str, BaseException]]:
        """Commit ``writes`` in one write transaction; returns ``(sql, error)`` for each one
        dropped.

        The common case is three round trips: ``BEGIN``; the writer's lock and every write,
        bound here (psycopg's client-side binding), as one multi-statement query; ``COMMIT``. So
        the lock is held across one round trip to this process, not one per statement: a
        process whose GIL sixty children share answers each round trip late, and every writer
        of the database waits for the lock meanwhile. When a write cannot be stored, the
        transaction is rolled back (nothing of it stays) and the batch is redone statement by
        statement (:meth:`apply`), dropping just the ones that fail.

        Raises:
            psycopg.Error: the transaction failed (the lock timed out, the server went away);
                nothing of it is stored.
        """
        literal = self.psycopg.ClientCursor(conn)
        try:
            script = [f"SELECT pg_advisory_xact_lock({ADVISORY_KEY})"]
            script += [_bound(literal, self.sql(sql), self.params(p)) for sql, p in writes]
            conn.execute("BEGIN")
            conn.execute(";\n".join(script))
            conn.execute("COMMIT")
            return []
        except self.write_errors:
            self.rollback(conn)
        except BaseException:
            self.rollback(conn)
            raise
        return _apply_committed(self, conn, writes)

    def apply(self, conn: Any, writes: Sequence[Write]) -> list[tuple[str, BaseException]]:
        """Run ``writes`` in the open transaction; returns ``(sql, error)`` for each one dropped.

        A failing statement aborts a PostgreSQL transaction, so the common case runs the batch
        under one savepoint, pipelined; only when a statement fails is the batch redone from
        that savepoint with one savepoint per statement, dropping just the statements that fail.
        """
        conn.execute("SAVEPOINT kernos_batch")
        try:
            with conn.pipeline():  # one round trip for the batch, not one per statement
                for sql, params in writes:
                    _execute_clean(conn, self.sql(sql), params, self.params, nul=True)
        except self.write_errors:
            conn.execute("ROLLBACK TO SAVEPOINT kernos_batch")
        else:
            conn.execute("RELEASE SAVEPOINT kernos_batch")
            return []
        dropped: list[tuple[str, BaseException]] = []
        for sql, params in writes:
            conn.execute("SAVEPOINT kernos_write")
            try:
                _execute_clean(conn, self.sql(sql), params, self.params, nul=True)
            except self.write_errors as exc:
                conn.execute("ROLLBACK TO SAVEPOINT kernos_write")
                dropped.append((sql, exc))
            else:
                conn.execute("RELEASE SAVEPOINT kernos_write")
        conn.execute("RELEASE SAVEPOINT kernos_batch")
        return dropped

    def is_busy(self, exc: BaseException) -> bool:
        return isinstance(exc, self.psycopg.errors.LockNotAvailable)

    def is_damage(self, exc: BaseException) -> bool:
        return False  # a server has no file to damage; its errors say what they are

    def is_unreachable(self, exc: BaseException) -> bool:
        """The server cannot be reached, refuses us, or is shutting down (not a SQL mistake)."""
        return isinstance(exc, self.psycopg.OperationalError)

    def unreachable(self, exc: BaseException) -> str:
        """The first line of a connection error, without the URL's password."""
        text = " ".join(str(exc).split()) or type(exc).__name__
        for password in url_password(self.url):
            text = text.replace(password, "[redacted]")
        return text


def _pg_rows(cursor: Any) -> Callable[[Sequence[Any]], Row]:
    names = [column.name for column in cursor.description or ()]
    index = _column_index(names)
    return lambda values: Row(index, values)
