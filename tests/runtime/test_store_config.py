"""``[store] url`` and ``KERNOS_STORE_URL``, and the pure rules of the two SQL dialects."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernos.runtime import (
    ConfigError,
    Store,
    StoreError,
    is_postgres_url,
    load_config,
    scrub_text,
)
from kernos.runtime._store._dialect import _pg_ddl, _pg_sql, display_url


def test_no_url_means_the_sqlite_file(tmp_path: Path) -> None:
    assert load_config(cwd=tmp_path).store_url is None


def test_the_config_url_and_the_environment_that_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[store]\nurl = "postgresql://k:${PGPASS}@db.internal:5433/kernos"\n', encoding="utf-8"
    )
    monkeypatch.setenv("PGPASS", "from-the-env-1")
    assert load_config(cwd=tmp_path).store_url == (
        "postgresql://k:from-the-env-1@db.internal:5433/kernos"
    )
    monkeypatch.setenv("KERNOS_STORE_URL", "postgres://other@127.0.0.1/k2")
    assert load_config(cwd=tmp_path).store_url == "postgres://other@127.0.0.1/k2"


def test_the_password_is_a_secret(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[store]\nurl = "postgresql://kernos:p%40ss-w0rd-x@db:5432/kernos"\n', encoding="utf-8"
    )
    load_config(cwd=tmp_path)
    assert scrub_text("login with p%40ss-w0rd-x or p@ss-w0rd-x") == (
        "login with [redacted] or [redacted]"
    )


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("mysql://u@h/db", "unknown scheme 'mysql://' (the store takes postgresql://)"),
        ("sqlite:///.kernos/k.db", "unknown scheme 'sqlite://' (the store takes postgresql://)"),
        ("db.internal:5432", "'db.internal:5432' is not a URL"),
    ],
)
def test_a_url_kernos_cannot_use_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, problem: str
) -> None:
    (tmp_path / "kernos.toml").write_text(f'[store]\nurl = "{url}"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(cwd=tmp_path)
    assert str(caught.value) == (
        f"{tmp_path / 'kernos.toml'}: store.url: {problem}; write "
        "postgresql://user:password@host:port/database, or remove it to use SQLite"
    )
    monkeypatch.setenv("KERNOS_STORE_URL", url)
    with pytest.raises(ConfigError, match=r"^\(environment\): KERNOS_STORE_URL: "):
        load_config(cwd=tmp_path)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://k@db/kernos",
        "postgres://k@db/kernos",
        "PostgreSQL://k@db/kernos",
        " postgres://db/k",
    ],
)
def test_one_answer_to_is_this_a_postgresql_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """The config check, the store, the task engine choice and DBOS's database agree."""
    from kernos.tasks._dbos import system_database_url
    from kernos.tasks._engine import crash_mode, engine_name

    monkeypatch.delenv("KERNOS_TASK_ENGINE", raising=False)
    monkeypatch.setenv("KERNOS_STORE_URL", url)
    config = load_config(cwd=tmp_path)  # accepted: no ConfigError
    assert is_postgres_url(url)
    assert engine_name(config, url) == "dbos"
    assert crash_mode(config, url) == "resume"
    assert system_database_url(tmp_path, url) == url
    monkeypatch.delenv("KERNOS_STORE_URL")
    for other in ("/srv/k.db", "postgresql-ish", "postgresqlx://h/db", ""):
        assert not is_postgres_url(other)
        assert engine_name(config, other) == "local"
        assert crash_mode(config, other) == "lost"


def test_an_unknown_config_key_in_store(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text('[store]\npath = "x"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"store\.path: unknown key"):
        load_config(cwd=tmp_path)


def test_a_server_that_refuses_is_a_store_error_without_the_password() -> None:
    url = "postgresql://kernos:hunter2-secret@127.0.0.1:1/kernos"
    with pytest.raises(StoreError) as caught:
        Store(url, timeout=2)
    text = str(caught.value)
    assert text.startswith("postgresql://kernos@127.0.0.1:1/kernos: cannot use this PostgreSQL")
    assert "hunter2" not in text and "\n" not in text
    assert isinstance(caught.value, ConfigError)  # a state error: the CLI exits 2


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://k:pw@db:5432/kernos", "postgresql://k@db:5432/kernos"),
        ("postgresql://k@db/kernos", "postgresql://k@db/kernos"),
        (
            "postgresql://:pw@[::1]:5432/k?sslmode=require",
            "postgresql://[::1]:5432/k?sslmode=require",
        ),
        ("postgresql://k:pw@db:port/kernos", "postgresql://k@db:port/kernos"),
    ],
)
def test_display_url_drops_the_password(url: str, shown: str) -> None:
    assert display_url(url) == shown


def test_placeholders_and_percent_signs_for_psycopg() -> None:
    assert _pg_sql("SELECT * FROM t WHERE a = ? AND b LIKE '50%?' AND c = ?") == (
        "SELECT * FROM t WHERE a = %s AND b LIKE '50%%?' AND c = %s"
    )
    assert _pg_sql("SELECT \"we?ird\" FROM t WHERE x = 'it''s ?'") == (
        "SELECT \"we?ird\" FROM t WHERE x = 'it''s ?'"
    )


def test_migration_types_for_postgres() -> None:
    ddl = _pg_ddl(
        "CREATE TABLE u (id INTEGER PRIMARY KEY AUTOINCREMENT, n integer NOT NULL, at REAL,"
        " k INTEGER PRIMARY KEY, realm TEXT, interval_s integer)",
    )
    assert ddl == (
        "CREATE TABLE u (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, n BIGINT NOT"
        " NULL, at DOUBLE PRECISION, k BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"
        " realm TEXT, interval_s BIGINT)"
    )
