"""The store under concurrency and faults: many processes opening a fresh store at once, damaged
or unusable files as a :class:`StoreError` with a fix, private file modes."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from kernos.runtime import ConfigError, Store, StoreError
from tests._postgres import create_database

PROCESSES = 16
ROUNDS = 4
DEMO = [
    (1, "items", "CREATE TABLE items (id INTEGER PRIMARY KEY)"),
    (2, "item names", "ALTER TABLE items ADD COLUMN name TEXT"),
]


def _open_at_once(path: str, barrier: multiprocessing.synchronize.Barrier) -> str:
    barrier.wait()
    try:
        store = Store(path)
        store.migrate("demo", DEMO)
        store.execute("INSERT INTO items (name) VALUES ('x')")
        store.close()
    except Exception as exc:  # the parent asserts on the text
        return f"{type(exc).__name__}: {exc}"
    return "ok"


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_many_processes_open_a_fresh_store_at_once(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    ctx = multiprocessing.get_context("forkserver")
    # psycopg too: sixteen imports of it at once would dwarf what is tested
    ctx.set_forkserver_preload(
        ["kernos.runtime", "kernos.runtime._store._dialect", "psycopg", __name__]
    )
    server = request.getfixturevalue("postgres_url") if kind == "postgres" else ""
    for attempt in range(ROUNDS if kind == "sqlite" else ROUNDS // 2):
        if kind == "postgres":  # migrations applied once under the advisory lock
            path: Path | str = create_database(server)
        else:
            path = tmp_path / f"round{attempt}" / "kernos.db"
        barrier = ctx.Manager().Barrier(PROCESSES)
        with ctx.Pool(PROCESSES) as pool:
            outcomes = pool.starmap(_open_at_once, [(str(path), barrier)] * PROCESSES)
        assert outcomes == ["ok"] * PROCESSES
        store = Store(path)
        assert store.versions("runtime") == [1, 2, 3]
        assert store.versions("demo") == [1, 2]
        assert store.query("SELECT COUNT(*) FROM items")[0][0] == PROCESSES
        store.close()


def _one_line(exc: StoreError) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


def test_garbage_truncated_and_zeroed_files_are_a_store_error(tmp_path: Path) -> None:
    good = tmp_path / "good.db"
    store = Store(good)
    for n in range(300):
        store.record_turn("s", "main", "user", "x" * 400 + str(n))
    store.close()
    data = good.read_bytes()
    cases = {
        "garbage.db": b"this is not a database\n" * 100,
        "zeroed.db": b"\0" * 100 + data[100:],
        "truncated.db": data[: len(data) // 3],
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(StoreError) as caught:
            Store(path)
        text = _one_line(caught.value)
        assert text.startswith(f"{path}: not a readable kernos store")
        assert f"mv {path} {path}.broken" in text
        assert isinstance(caught.value, ConfigError)  # a state error: the CLI exits 2


def test_a_directory_where_the_file_should_be(tmp_path: Path) -> None:
    (tmp_path / "kernos.db").mkdir()
    with pytest.raises(StoreError) as caught:
        Store(tmp_path / "kernos.db")
    assert _one_line(caught.value) == (
        f"{tmp_path / 'kernos.db'}: is a directory, not a database file; move it aside and run "
        "again to start a fresh store"
    )


def test_a_file_where_the_home_should_be(tmp_path: Path) -> None:
    home = tmp_path / ".kernos"
    home.write_text("oops", encoding="utf-8")
    with pytest.raises(StoreError) as caught:
        Store.open(home)
    assert "is a file, not a directory" in _one_line(caught.value)
    with pytest.raises(StoreError) as caught:
        Store.open(home / "deeper")
    assert f"because {home} is a file" in _one_line(caught.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through a read-only mode")
def test_an_unwritable_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o500)
    try:
        with pytest.raises(StoreError) as caught:
            Store.open(home)
    finally:
        home.chmod(0o700)
    assert "set KERNOS_HOME to a writable directory" in _one_line(caught.value)


def test_a_missing_table_is_named(tmp_path: Path) -> None:
    path = tmp_path / "kernos.db"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE turns")
    with pytest.raises(StoreError) as caught:
        Store(path)
    assert "the runtime table turns is missing" in _one_line(caught.value)


def test_a_migration_mistake_is_not_a_store_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "kernos.db")
    with pytest.raises(sqlite3.OperationalError):
        store.migrate("bad", [(1, "t", "CREATE TABLE nonsense nonsense")])
    store.close()


def test_files_are_private(tmp_path: Path) -> None:
    home = tmp_path / ".kernos"
    store = Store.open(home)
    store.record_turn("s", "main", "user", "a private transcript")
    for name in ("kernos.db", "kernos.db-wal", "kernos.db-shm"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    store.close()


def test_an_existing_readable_database_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "kernos.db"
    Store(path).close()
    path.chmod(0o644)
    Store(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
