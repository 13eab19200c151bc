"""The ``sessions`` table (runtime migration 2) and its read queries, on a real SQLite file:
from a blank store and from the previous schema (sessions backfilled from their turns)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kernos.runtime import Store, get_session, latest_session, list_sessions, record_session
from kernos.runtime._store._store import _RUNTIME_MIGRATIONS


def test_a_store_at_the_previous_schema_gets_its_sessions_from_their_turns(tmp_path: Path) -> None:
    path = tmp_path / "kernos.db"
    with sqlite3.connect(path) as db:  # what a kernos of the previous release left
        db.execute(
            "CREATE TABLE schema_migrations (namespace TEXT NOT NULL, version INTEGER NOT NULL,"
            " name TEXT NOT NULL, applied_at REAL NOT NULL, PRIMARY KEY (namespace, version))"
        )
        db.executescript(_RUNTIME_MIGRATIONS[0][2])
        db.execute("INSERT INTO schema_migrations VALUES ('runtime', 1, 'turns', 0)")
        rows = [("s_old1", "main", "user", "first", 0, 0, 100.0),
                ("s_old1", "main", "assistant", "answer", 11, 2, 101.0),
                ("s_old2", "release", "user", "second", 0, 0, 200.0)]  # fmt: skip
        db.executemany(
            "INSERT INTO turns (session_id, agent, role, text, input_tokens, output_tokens,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    store = Store(path)
    assert store.versions("runtime") == [1, 2, 3]
    assert list_sessions(store) == [
        {"id": "s_old2", "agent": "release", "model": None, "started_at": 200.0, "turns": 1,
         "input_tokens": 0, "output_tokens": 0, "last_active": 200.0, "first_prompt": "second"},
        {"id": "s_old1", "agent": "main", "model": None, "started_at": 100.0, "turns": 2,
         "input_tokens": 11, "output_tokens": 2, "last_active": 101.0, "first_prompt": "first"},
    ]  # fmt: skip
    store.close()


def test_only_top_level_sessions_with_turns_are_listed_most_recent_first(tmp_path: Path) -> None:
    store = Store(tmp_path / "kernos.db")
    assert list_sessions(store) == [] and latest_session(store) is None
    record_session(store, "s_a", "main", "openai-chat:a")
    record_session(store, "s_b", "main", "openai-chat:b")
    record_session(store, "s_empty", "main", "openai-chat:a")
    for sid, agent, text, at in [
        ("s_a", "main", "older", 1.0),
        ("s_b", "main", "newer", 2.0),
        ("s_child", "explore", "a child's turn: it has no sessions row", 3.0),
        ("s_a", "main", "active again", 4.0),
    ]:
        store.execute(
            "INSERT INTO turns (session_id, agent, role, text, created_at) VALUES (?, ?, ?, ?, ?)",
            (sid, agent, "user", text, at),
        )
    assert [s["id"] for s in list_sessions(store)] == ["s_a", "s_b"]
    assert [s["id"] for s in list_sessions(store, limit=1)] == ["s_a"]
    latest = latest_session(store)
    assert latest is not None and latest["first_prompt"] == "older" and latest["turns"] == 2
    assert get_session(store, "s_child") is None and get_session(store, "s_nope") is None
    empty = get_session(store, "s_empty")
    assert empty is not None and (empty["turns"], empty["last_active"]) == (0, None)
    store.close()


def test_recording_a_session_again_keeps_its_start_and_takes_the_new_model(tmp_path: Path) -> None:
    store = Store(tmp_path / "kernos.db")
    record_session(store, "s_a", "main", "openai-chat:a")
    store.record_turn("s_a", "main", "user", "hi")
    first = get_session(store, "s_a")
    record_session(store, "s_a", "main", "openai-chat:b")
    again = get_session(store, "s_a")
    assert first is not None and again is not None
    assert (again["model"], again["started_at"]) == ("openai-chat:b", first["started_at"])
    store.close()
