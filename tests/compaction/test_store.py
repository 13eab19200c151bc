"""The compactions table (runtime/_session/_compaction_store.py): its own migration namespace,
applied on first use to a blank store and to one made before it existed; rows read back with their
ratio; the newest approved summary is what a resumed session is sent."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kernos.runtime import Store, Summary, compaction_text, compactions, latest_summary


def row(status: str, last: int, summary: str | None) -> dict[str, object]:
    return {
        "session_id": "s_1", "agent": "main", "first_turn": 1, "last_turn": last,
        "tokens_before": 1000, "tokens_after": 250 if summary else 0, "model": "x",
        "drafts": 2, "losses": [{"content": "the listing", "reason": "read it again"}],
        "status": status, "verdict": "ok" if summary else None, "summary": summary,
    }  # fmt: skip


def test_a_store_made_before_the_table_gets_it_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "kernos.db"
    first = Store(path)
    compactions(first, "s_1")
    first.close()
    with sqlite3.connect(path) as conn:  # the schema before compaction existed
        conn.execute("DROP TABLE compactions")
        conn.execute("DELETE FROM schema_migrations WHERE namespace = 'compaction'")
    store = Store(path)
    assert compactions(store, "s_1") == []
    assert store.versions("compaction") == [1]
    store.close()


def test_rows_read_back_and_the_newest_approved_summary_wins(tmp_path: Path) -> None:
    from kernos.runtime._session._compaction_store import record_compaction

    store = Store(tmp_path / "kernos.db")
    assert latest_summary(store, "s_1") is None
    record_compaction(store, row("approved", 3, "first summary"))
    record_compaction(store, row("approved", 7, "second summary"))
    record_compaction(store, row("unapproved", 9, None))
    rows = compactions(store, "s_1")
    assert [r["status"] for r in rows] == ["approved", "approved", "unapproved"]
    assert rows[0]["ratio"] == 0.75 and rows[2]["ratio"] == 0.0
    assert latest_summary(store, "s_1") == Summary(
        1, 7, "second summary", (("the listing", "read it again"),)
    )
    assert compaction_text(rows[0]).splitlines() == [
        "[compaction] turns 1–3: approved, 1000 → 250 tokens (75.0% smaller), 2 draft(s) by x, "
        "1 declared loss(es)",
        "  - the listing",
        "    because: read it again",
    ]
    store.close()


def test_a_compaction_recorded_first_on_a_blank_store_makes_its_table(tmp_path: Path) -> None:
    from kernos.runtime._session._compaction_store import record_compaction

    store = Store(tmp_path / "kernos.db")
    assert store.versions("compaction") == []  # the store alone knows nothing of compaction
    record_compaction(store, row("approved", 3, "first summary"))
    assert [r["last_turn"] for r in compactions(store, "s_1")] == [3]
    store.close()
