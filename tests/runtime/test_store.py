"""The store: numbered migrations per namespace, WAL, redaction."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kernos.runtime import Store, redact


def test_blank_database_gets_every_migration_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    assert store.versions("runtime") == [1, 2]
    assert store.query("PRAGMA journal_mode")[0][0] == "wal"
    migrations = [(1, "a", "CREATE TABLE a (x INTEGER)"), (2, "b", "ALTER TABLE a ADD y TEXT")]
    assert store.migrate("demo", migrations[:1]) == [1]
    store.close()
    # reopening at the previous schema applies only what is new
    store = Store(tmp_path / "k.db")
    assert store.migrate("demo", migrations) == [2]
    assert store.migrate("demo", migrations) == []
    store.execute("INSERT INTO a (x, y) VALUES (1, 'z')")
    store.close()


def test_a_failing_migration_rolls_back(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    with pytest.raises(sqlite3.OperationalError):
        store.migrate("bad", [(1, "t", "CREATE TABLE t (x INTEGER); CREATE TABLE t (x INTEGER)")])
    assert store.versions("bad") == []
    assert store.query("SELECT name FROM sqlite_master WHERE name = 't'") == []
    store.close()


def test_redaction_by_key_and_by_shape() -> None:
    data = {
        "api_key": "abc",
        "headers": {"Authorization": "Bearer abcdefghijk"},
        "note": "use sk-abcdefghijklmnop please",
        "items": ["Bearer 0123456789abc", 3],
    }
    assert redact(data) == {
        "api_key": "[redacted]",
        "headers": {"Authorization": "[redacted]"},
        "note": "use [redacted] please",
        "items": ["[redacted]", 3],
    }
