"""The store: numbered migrations per namespace, WAL, redaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernos.runtime import Store, redact
from tests._stores import SQL_MISTAKE, table_names


def test_blank_database_gets_every_migration_once(store_target: str) -> None:
    store = Store(store_target)
    assert store.versions("runtime") == [1, 2, 3]
    migrations = [(1, "a", "CREATE TABLE a (x INTEGER)"), (2, "b", "ALTER TABLE a ADD y TEXT")]
    assert store.migrate("demo", migrations[:1]) == [1]
    store.close()
    # reopening at the previous schema applies only what is new
    store = Store(store_target)
    assert store.migrate("demo", migrations) == [2]
    assert store.migrate("demo", migrations) == []
    store.execute("INSERT INTO a (x, y) VALUES (1, 'z')")
    assert [tuple(row) for row in store.query("SELECT x, y FROM a")] == [(1, "z")]
    store.close()


def test_a_sqlite_store_is_in_wal_mode(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    assert store.query("PRAGMA journal_mode")[0][0] == "wal"
    store.close()


def test_a_failing_migration_rolls_back(store_target: str) -> None:
    store = Store(store_target)
    with pytest.raises(SQL_MISTAKE):
        store.migrate("bad", [(1, "t", "CREATE TABLE t (x INTEGER); CREATE TABLE t (x INTEGER)")])
    assert store.versions("bad") == []
    assert "t" not in table_names(store_target)
    store.close()


def test_rows_read_alike_by_position_name_and_dict(store_target: str) -> None:
    store = Store(store_target)
    store.migrate("demo", [(1, "items", "CREATE TABLE items (id INTEGER PRIMARY KEY, at REAL)")])
    store.execute("INSERT INTO items (at) VALUES (?)", (1796000000.123456,))
    store.execute("INSERT INTO items (at) VALUES (?)", (1796000000.5,))
    rows = store.query("SELECT id, at FROM items ORDER BY id")
    assert [row[0] for row in rows] == [1, 2]  # the database assigns the ids, on both
    assert rows[0]["at"] == 1796000000.123456  # a double, not PostgreSQL's 4-byte REAL
    assert dict(rows[1]) == {"id": 2, "at": 1796000000.5}
    store.close()


def test_percent_and_question_marks_in_text_are_data(store_target: str) -> None:
    store = Store(store_target)
    store.record_turn("s_%", "main", "user", "100% sure? yes '?' and \"%s\"")
    assert [t["text"] for t in store.turns("s_%")] == ["100% sure? yes '?' and \"%s\""]
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
