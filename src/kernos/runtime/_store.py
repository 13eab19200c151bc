"""The durable store: one SQLite file (WAL, ``synchronous=NORMAL``) under the kernos home.

Each subsystem owns its tables and registers numbered migrations under its own namespace, so the
runtime never needs to know what a task is. Migrations run when the store opens, in order, each in
its own transaction; ``schema_migrations`` records what ran.

Writes off the hot path: :meth:`Store.write_later` (turns, task rows and events) buffers a write;
everything buffered during one turn of the event loop is committed in one transaction, on the
store's writer thread, never on the loop's. Order is kept (one FIFO of batches, drained under one
lock), a batch that fails stays queued ahead of newer ones, and every read through the store's
readers flushes first, so a reader never sees an older state than a writer set.

Durability: a write is *acknowledged* once a flush that contains it has returned — the sync
:meth:`Store.flush`, or ``await`` :meth:`Store.flushed` (a session awaits it before its prompt
returns). An acknowledged write is in the WAL, in the operating system's hands: it survives the
process being killed (``kill -9``); with ``synchronous=NORMAL`` only a power loss or an OS crash
can still take the last commits. A write that was buffered and not yet acknowledged when the
process dies is lost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sqlite3
import stat
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernos.runtime._errors import ConfigError
from kernos.runtime._secrets import scrub_text

if TYPE_CHECKING:
    import asyncio  # only a command that runs a loop loads it (start-up: `kernos tasks list`)

log = logging.getLogger("kernos.store")

Migration = tuple[int, str, str]
"""``(version, name, sql)``; versions start at 1 and increase by one."""

Write = tuple[str, Sequence[Any]]
"""``(sql, params)``: one buffered statement."""

_INSERT_TURN = (
    "INSERT INTO turns (session_id, agent, role, text, tool_calls, tool_results,"
    " input_tokens, output_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

#: How long the loop waits before retrying writes a locked or failing store did not take.
RETRY_SECONDS = 0.5

#: Errors of one statement that retrying cannot fix; the rest of the flush goes on without it.
_WRITE_ERRORS = (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError,
                 sqlite3.DataError, OverflowError, ValueError)  # fmt: skip


def _apply(conn: sqlite3.Connection, writes: Sequence[Write]) -> list[tuple[str, BaseException]]:
    """Run ``writes`` in the open transaction; returns ``(sql, error)`` for each one dropped.

    A failing statement undoes only itself (SQLite's statement-level ABORT), so the transaction
    stays usable. Text SQLite cannot encode (a lone surrogate a model sent) is stored cleaned.
    """
    dropped: list[tuple[str, BaseException]] = []
    for sql, params in writes:
        try:
            conn.execute(sql, tuple(params))
        except UnicodeEncodeError:
            try:
                conn.execute(sql, tuple(_encodable(p) for p in params))
            except _WRITE_ERRORS as exc:
                dropped.append((sql, exc))
        except _WRITE_ERRORS as exc:
            dropped.append((sql, exc))
    return dropped


def _encodable(value: Any) -> Any:
    """``value`` with lone surrogates replaced by U+FFFD (pairs are joined)."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return value


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


class StoreError(ConfigError):
    """The store cannot be used: its file is damaged, missing a table, or cannot be created.

    A state error (exit 2): the message names the file and says what to do, e.g. move a damaged
    ``kernos.db`` aside so the next run starts a fresh one.
    """

    def __init__(self, path: Path | str | None, problem: str, fix: str) -> None:
        super().__init__(path, "(store)", problem, fix)
        self.args = (str(self),)

    def __str__(self) -> str:
        return f"{self.file}: {self.problem}; {self.fix}"


#: Lock errors worth waiting out (another process is creating or migrating the same store).
_BUSY = ("database is locked", "database table is locked", "database is busy")


def _is_busy(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and any(b in str(exc) for b in _BUSY)


def _is_damage(exc: BaseException) -> bool:
    """A file that is not (or no longer) a SQLite database; plain SQL mistakes are not."""
    return type(exc) is sqlite3.DatabaseError or (
        isinstance(exc, sqlite3.DatabaseError) and "malformed" in str(exc)
    )


def _damaged(path: Path | None, exc: BaseException) -> StoreError:
    where = str(path) if path is not None else "the store"
    return StoreError(
        path,
        f"not a readable kernos store ({exc})",
        f"move it aside (mv {where} {where}.broken) and run again to start a fresh store",
    )


def _unopenable(path: Path, exc: BaseException) -> StoreError:
    """Why the store's file or directory cannot be opened, with the fix for that case."""
    home = path.parent
    if home.exists() and not home.is_dir():
        return StoreError(
            home,
            "is a file, not a directory, so the store cannot live there",
            "move the file aside or set KERNOS_HOME to a directory",
        )
    for parent in home.parents:
        if parent.exists() and not parent.is_dir():
            return StoreError(
                home,
                f"cannot be created because {parent} is a file",
                "set KERNOS_HOME to a directory you can write",
            )
    if path.is_dir():
        return StoreError(
            path,
            "is a directory, not a database file",
            "move it aside and run again to start a fresh store",
        )
    reason = getattr(exc, "strerror", None) or str(exc)
    return StoreError(
        path,
        f"cannot be opened for writing ({reason})",
        f"make {home} and the file writable by you, or set KERNOS_HOME to a writable directory",
    )


def _created_private(path: Path) -> None:
    """Create the database file ``0600`` before SQLite does (its ``-wal``/``-shm`` files copy
    the database's mode); an existing file readable by others is made private."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        return
    if stat.S_ISREG(mode) and mode & 0o077:
        with contextlib.suppress(OSError):  # not ours to change: leave it as it is
            os.chmod(path, stat.S_IMODE(mode) & 0o600)


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
    """A thread-safe handle on the SQLite store.

    Args:
        path: the database file, created ``0600``; its directory is created. ``":memory:"`` for
            tests of pure code.
        timeout: how long a write waits for another process's lock, in seconds.

    Raises:
        StoreError: the file or its directory cannot be created or opened, or it is not a kernos
            store (garbage, truncated, a directory, a table missing).
    """

    def __init__(self, path: Path | str, *, timeout: float = 30.0) -> None:
        self.path = Path(path) if str(path) != ":memory:" else None
        self.timeout = timeout
        self._lock = threading.RLock()
        self._buffer: list[Write] = []  # this loop turn's writes
        self._batches: deque[list[Write]] = deque()  # handed to the writer, oldest first
        self._writer = threading.Lock()  # held while draining _batches: one drain at a time
        # the loop a commit of the buffer is scheduled on (a loop that closed first does not count)
        self._scheduled: asyncio.AbstractEventLoop | None = None
        self._executor: ThreadPoolExecutor | None = None
        if self.path is not None:
            try:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                _created_private(self.path)
                self._conn = sqlite3.connect(
                    str(path), check_same_thread=False, isolation_level=None, timeout=timeout
                )
            except (OSError, sqlite3.Error) as exc:
                raise _unopenable(self.path, exc) from None
        else:
            self._conn = sqlite3.connect(
                ":memory:", check_same_thread=False, isolation_level=None, timeout=timeout
            )
        try:
            self._setup()
        except StoreError:
            self._conn.close()
            raise
        except sqlite3.Error as exc:
            self._conn.close()
            if _is_damage(exc):
                raise _damaged(self.path, exc) from None
            if self.path is not None:
                raise _unopenable(self.path, exc) from None
            raise

    def _setup(self) -> None:
        self._conn.row_factory = sqlite3.Row
        self._conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        if self.path is not None:
            self._wal()
            # in WAL mode a commit survives the process being killed; fsync at checkpoints only
            self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " namespace TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,"
            " applied_at REAL NOT NULL, PRIMARY KEY (namespace, version))"
        )
        self.migrate("runtime", _RUNTIME_MIGRATIONS)

    def _wal(self) -> None:
        # Switching to WAL takes an exclusive lock without SQLite's busy handler: when several
        # processes open a fresh store at once, the losers see "database is locked". Wait it out.
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(0.01)

    @classmethod
    def open(cls, home: Path) -> Store:
        """The store of a kernos home: ``HOME/kernos.db``.

        Raises:
            StoreError: see :class:`Store`.
        """
        return cls(home / "kernos.db")

    def close(self) -> None:
        """Commit what is still buffered (a failure is logged: nothing more can be done), stop the
        writer thread and close the file."""
        try:
            self.flush()
        except sqlite3.Error as exc:
            log.error("store: %d write(s) not committed at close: %s", self._pending(), exc)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        with self._lock:
            self._conn.close()

    def _applied(self, namespace: str) -> set[int]:
        return {
            row[0]
            for row in self._conn.execute(
                "SELECT version FROM schema_migrations WHERE namespace = ?", (namespace,)
            )
        }

    def migrate(self, namespace: str, migrations: Sequence[Migration]) -> list[int]:
        """Apply the migrations of ``namespace`` not applied yet; returns the versions applied.

        Safe when several processes open a fresh store at once: what is applied is read again
        inside each migration's write transaction, so a version another process just applied is
        skipped, not run twice.

        Raises:
            StoreError: the file is damaged, or a table the migrations made is missing.
        """
        applied: list[int] = []
        with self._lock:
            try:
                done = self._applied(namespace)  # the common case: nothing to do, no write lock
                for version, name, sql in sorted(migrations):
                    if version in done:
                        continue
                    self._conn.execute("BEGIN IMMEDIATE")
                    try:
                        if version in self._applied(namespace):
                            self._conn.execute("COMMIT")  # another process applied it meanwhile
                            continue
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
                self._check_tables(namespace, migrations)
            except sqlite3.DatabaseError as exc:
                if _is_damage(exc):
                    raise _damaged(self.path, exc) from None
                raise
        return applied

    def _check_tables(self, namespace: str, migrations: Sequence[Migration]) -> None:
        expected = _tables(migrations)
        if not expected:
            return
        rows = self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        present = {row[0] for row in rows}
        missing = sorted(expected - present)
        if missing:
            raise StoreError(
                self.path,
                f"the {namespace} table {missing[0]} is missing although its migration is "
                "recorded (the file was changed outside kernos)",
                "move the file aside and run again to start a fresh store",
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
        """Run one statement now, after every buffered write; returns ``lastrowid``."""
        self.flush()
        with self._lock, self._translated():
            cursor = self._conn.execute(sql, tuple(params))
            return cursor.lastrowid or 0

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock, self._translated():
            return list(self._conn.execute(sql, tuple(params)))

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """A file found damaged mid-use is a :class:`StoreError`; SQL mistakes stay as they are."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if _is_damage(exc):
                raise _damaged(self.path, exc) from None
            raise

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

    # -- buffered writes -----------------------------------------------------------------------
    def write_later(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Buffer one write: on a running event loop it is committed with the rest of this loop
        turn's writes, on the writer thread; with no loop running it is committed now.

        Raises:
            sqlite3.Error: (no loop running only) the store did not take it; it stays buffered.
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

        A write that can never be stored (a constraint it breaks, a value SQLite cannot take) is
        dropped and logged on its own; the other writes of the same flush still commit. When the
        transaction itself fails (the store is locked, closed or full) nothing is lost: every
        write stays buffered, ahead of newer ones, for the next flush, and the error is raised.
        """
        self._hand_over()
        if self._batches:
            self._drain()

    async def flushed(self) -> None:
        """Wait until every write buffered so far is committed (acknowledged), off the loop's
        thread.

        Raises:
            sqlite3.Error: the transaction failed; the writes stay buffered for the next flush.
        """
        import asyncio

        self._hand_over()
        if self._batches:
            await asyncio.get_running_loop().run_in_executor(self._thread(), self._drain)

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
            with self._translated(), self.transaction() as conn:
                dropped = _apply(conn, writes)
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
    ) -> None:
        """Append one conversation turn (secrets redacted); buffered (:meth:`write_later`)."""
        self.write_later(
            _INSERT_TURN,
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
        self.flush()
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
