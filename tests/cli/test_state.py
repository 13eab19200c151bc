"""Broken state through the real CLI: a damaged or misplaced store, an unwritable home, a missing
table, non-UTF-8 config, an absurd ``--limit``. Each is one line on stderr saying what is wrong and
what to do, exit 2; a log file that cannot be opened is one warning, and the command goes on."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from kernos.cli import app
from kernos.testing import FakeOpenAIServer, text
from tests import _cli

CHANNEL = '[channels.log]\nkind = "file"\npath = "out/messages.jsonl"\n'


@pytest.fixture(autouse=True)
def _own_log_handlers() -> Iterator[None]:
    """In-process runs add a file handler to the ``kernos`` logger; drop it after each test."""
    logger = logging.getLogger("kernos")
    before = list(logger.handlers)
    yield
    for handler in logger.handlers[:]:
        if handler not in before:
            logger.removeHandler(handler)
            handler.close()


def cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def one_line_error(result: Result) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr and result.stdout == ""
    return lines[0]


def kernos(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "KERNOS_HOME": str(cwd / ".kernos"), **(env or {})}
    return _cli.kernos(*args, cwd=cwd, env=full, timeout=60)


def damaged_db(home: Path, content: bytes) -> Path:
    home.mkdir(exist_ok=True)
    path = home / "kernos.db"
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    "content",
    [b"garbage " * 512, b"\0" * 8192, b"SQLite format 3\0" + b"\x10\x00\x02\x02" + b"\0" * 60],
    ids=["garbage", "zeroed", "truncated"],
)
def test_a_damaged_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    monkeypatch.chdir(tmp_path)
    path = damaged_db(tmp_path / ".kernos", content)
    line = one_line_error(cli("tasks", "list"))
    assert line.startswith(f"error: {path}: not a readable kernos store (")
    assert line.endswith(
        f"move it aside (mv {path} {path}.broken) and run again to start a fresh store"
    )
    assert path.read_bytes() == content  # nothing was written over it


def test_kernos_run_on_a_damaged_database_is_one_line(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    path = damaged_db(tmp_path / ".kernos", b"garbage " * 512)
    result = kernos(tmp_path, "run", "hi", "-m", "openai-chat:x", env=server.env())
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {path}: not a readable kernos store (file is not a database); move it aside "
        f"(mv {path} {path}.broken) and run again to start a fresh store"
    ]
    assert server.requests == []  # nothing ran


def test_the_database_is_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".kernos" / "kernos.db").mkdir(parents=True)
    line = one_line_error(cli("tasks", "list"))
    assert "kernos.db: is a directory, not a database file; move it aside" in line


def test_the_home_is_a_file(tmp_path: Path, server: FakeOpenAIServer) -> None:
    (tmp_path / ".kernos").write_text("not a directory", encoding="utf-8")
    result = kernos(tmp_path, "run", "hi", "-m", "openai-chat:x", env=server.env())
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {tmp_path / '.kernos'}: is a file, not a directory, so the store cannot live "
        "there; move the file aside or set KERNOS_HOME to a directory"
    ]


def test_a_home_under_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plain").write_text("x", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNOS_HOME", str(tmp_path / "plain" / "home"))
    line = one_line_error(cli("tasks", "list"))
    assert f"cannot be created because {tmp_path / 'plain'} is a file" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through a read-only mode")
def test_an_unwritable_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o500)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNOS_HOME", str(home))
    try:
        line = one_line_error(cli("tasks", "list"))
    finally:
        home.chmod(0o700)
    assert "set KERNOS_HOME to a writable directory" in line


def test_a_missing_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli("tasks", "list").exit_code == 0
    with sqlite3.connect(tmp_path / ".kernos" / "kernos.db") as db:
        db.execute("DROP TABLE task_events")
    line = one_line_error(cli("tasks", "list"))
    assert "the tasks table task_events is missing" in line
    assert line.endswith("move the file aside and run again to start a fresh store")


def test_non_utf8_config_and_agent_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kernos.toml").write_bytes(b'default_model = "caf\xe9"\n')
    for args in (["tasks", "list"], ["run", "hi"], ["send", "log", "hi"]):
        line = one_line_error(cli(*args))
        assert line == (
            f"error: {tmp_path / 'kernos.toml'}: (file): is not UTF-8 text (byte 0xe9 at offset "
            "20); save it as UTF-8"
        )
    (tmp_path / "kernos.toml").write_text(CHANNEL, encoding="utf-8")
    agent = tmp_path / ".kernos" / "agents" / "explore.md"
    agent.parent.mkdir(parents=True)
    agent.write_bytes(b"---\ndescription: r\xff\n---\nHi\n")
    line = one_line_error(cli("run", "hi", "-m", "openai-chat:x"))
    assert f"{agent}: (file): is not UTF-8 text (byte 0xff" in line


def test_an_absurd_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_line_error(cli("tasks", "list", "-n", "100000000000000000000"))
    assert line == (
        "error: --limit must be between 1 and 9223372036854775807; got 100000000000000000000"
    )
    assert cli("tasks", "list", "-n", "9223372036854775807").stdout == "(no tasks)\n"


def test_an_unopenable_log_is_one_warning_and_send_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kernos.toml").write_text(CHANNEL, encoding="utf-8")
    (tmp_path / ".kernos" / "kernos.log").mkdir(parents=True)
    result = cli("send", "log", "hello")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "ok\n"
    (warning,) = result.stderr.splitlines()
    assert warning.startswith(
        f"warning: cannot write the log file {tmp_path / '.kernos' / 'kernos.log'}"
    )
    assert warning.endswith(
        "continuing without it. Make the directory writable or set KERNOS_HOME to one that is."
    )
    assert (tmp_path / "out" / "messages.jsonl").read_text(encoding="utf-8").count("hello") == 1


def test_send_with_a_home_that_is_a_file_still_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kernos.toml").write_text(CHANNEL, encoding="utf-8")
    (tmp_path / ".kernos").write_text("x", encoding="utf-8")
    result = cli("send", "log", "hello")
    assert result.exit_code == 0, result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("warning: ")


def test_kernos_run_with_an_unopenable_log_runs(tmp_path: Path, server: FakeOpenAIServer) -> None:
    (tmp_path / ".kernos" / "kernos.log").mkdir(parents=True)
    server.script(text("Hello."))
    result = kernos(tmp_path, "run", "hi", "-m", "openai-chat:x", "-q", env=server.env())
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello.\n"
    (warning,) = result.stderr.splitlines()
    assert warning.startswith("warning: cannot write the log file")


def test_the_log_and_the_database_are_private(tmp_path: Path, server: FakeOpenAIServer) -> None:
    server.script(text("Hello."))
    result = kernos(tmp_path, "run", "hi", "-m", "openai-chat:x", "-q", env=server.env())
    assert result.returncode == 0, result.stderr
    home = tmp_path / ".kernos"
    assert "run s_" in (home / "kernos.log").read_text(encoding="utf-8")
    for name in ("kernos.db", "kernos.log"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
