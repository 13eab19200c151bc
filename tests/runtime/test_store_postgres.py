"""What only a PostgreSQL store can meet: its connection dropped under it (a server restart, a
network cut). The writes of the failed flush stay buffered and commit once connected again."""

from __future__ import annotations

import psycopg
import pytest

from kernos.runtime import Store
from tests._stores import count_turns
from tests._wait import wait_for


def drop_kernos_connections(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'kernos' AND datname = current_database()"
        ).fetchall()
    return len(rows)


def test_a_dropped_connection_keeps_the_writes_and_reconnects(fresh_postgres_url: str) -> None:
    store = Store(fresh_postgres_url)
    store.record_turn("s_1", "main", "user", "before")  # no loop running: committed now
    assert drop_kernos_connections(fresh_postgres_url) == 1
    with pytest.raises(psycopg.OperationalError):
        store.record_turn("s_1", "main", "assistant", "during")  # the flush finds it gone
    assert count_turns(fresh_postgres_url, "s_1") == 1
    store.record_turn("s_1", "main", "user", "after")  # connects again; nothing was lost
    assert [t["text"] for t in store.turns("s_1")] == ["before", "during", "after"]
    store.close()


def test_a_read_after_the_connection_dropped_connects_again(fresh_postgres_url: str) -> None:
    store = Store(fresh_postgres_url)
    store.record_turn("s_2", "main", "user", "kept")
    drop_kernos_connections(fresh_postgres_url)
    with pytest.raises(psycopg.OperationalError):
        store.turns("s_2")
    assert [t["text"] for t in store.turns("s_2")] == ["kept"]
    store.close()


def test_a_transaction_its_client_left_idle_does_not_hold_the_lock(fresh_postgres_url: str) -> None:
    """A client cut off mid-transaction sends nothing more; the server ends the transaction once
    it has been idle as long as the store's timeout, and another writer gets the lock."""
    gone, other = Store(fresh_postgres_url, timeout=1.0), Store(fresh_postgres_url, timeout=5.0)
    with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout), gone.transaction() as conn:
        # holds the writer's lock, then says nothing more
        (backend,) = conn.execute("SELECT pg_backend_pid()").fetchone()
        alive = "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = %s"
        with psycopg.connect(fresh_postgres_url, autocommit=True) as admin:
            wait_for(
                lambda: admin.execute(alive, (backend,)).fetchone() == (0,),
                "the server to end the idle transaction's session",
            )
        other.record_turn("s_3", "main", "user", "written")  # waits up to 5 s for the lock
        assert count_turns(fresh_postgres_url, "s_3") == 1
    gone.record_turn("s_3", "main", "assistant", "connected again")  # nothing else was lost
    assert count_turns(fresh_postgres_url, "s_3") == 2
    other.close()
    gone.close()
