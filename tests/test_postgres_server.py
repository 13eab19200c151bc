"""The test PostgreSQL itself: it answers, databases are fresh, and nothing outlives stop()."""

from __future__ import annotations

import psutil
import psycopg

from ._postgres import PostgresServer


def test_server_answers_and_is_postgres_15(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
    assert row is not None and row[0].startswith("15")
    assert fsync == ("off",)


def test_each_test_gets_an_empty_database_of_its_own(
    postgres_url: str, fresh_postgres_url: str
) -> None:
    assert fresh_postgres_url != postgres_url
    with psycopg.connect(fresh_postgres_url) as conn:
        conn.execute("CREATE TABLE mine (x INTEGER)")
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    assert tables == [("mine",)]


def _postgres_processes(data_dir: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and data_dir in " ".join(cmdline):
            found.append(proc)
    return found


def test_stop_leaves_no_process_and_no_directory(postgres_url: str) -> None:
    server = PostgresServer().start()
    data = str(server.data)
    assert _postgres_processes(data)
    server.stop()
    assert not server.root.exists()
    assert _postgres_processes(data) == []
    server.stop()  # twice is harmless (atexit calls it again)
