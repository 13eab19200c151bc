"""``KERNOS_STORE_URL`` / ``[store] url``: kernos's store in PostgreSQL, shared by processes that
have nothing else in common; a bad URL or a server that is down is one line and exit 2, and the
password is never shown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.conftest import KERNOS

CONFIG = """
default_model = "openai-chat:test"

[agents.explore]
description = "Read-only research"
instructions = "EXPLORE-AGENT: you research."
"""
SPAWN = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
         "run_in_background": False}  # fmt: skip
PASSWORD = "s3cret-pg-password"


def is_child(request: dict[str, object]) -> bool:
    return "EXPLORE-AGENT" in json.dumps(request.get("messages"))


def kernos(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run kernos in ``cwd``; one that has not ended in 120 s prints every thread's stack
    (``SIGABRT`` with faulthandler on) and the test fails with them and the end of its log,
    well before the test's own time limit (which would leave the process running)."""
    home = cwd / ".kernos"
    full = {**os.environ, "KERNOS_HOME": str(home), "PYTHONFAULTHANDLER": "1", **(env or {})}
    proc = subprocess.Popen(
        [KERNOS, *args], cwd=cwd, env=full, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        out, error = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, error = proc.communicate(timeout=30)
        raise AssertionError(
            f"kernos {args} did not end in 120 s:\n{out}\n{error}\n{logs(cwd)}"
        ) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, error)


def logs(cwd: Path) -> str:
    """The end of each log kernos wrote under ``cwd``."""
    return "".join(p.read_text()[-6000:] for p in (cwd / ".kernos").rglob("*.log"))


def with_password(url: str) -> str:
    """``url`` with a password in it (the test server trusts every connection, so any works)."""
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@", 1)


@pytest.mark.timeout(400)
def test_a_child_spawned_by_run_is_seen_by_another_process(
    tmp_path: Path, server: FakeOpenAIServer, fresh_postgres_url: str
) -> None:
    runner, reader = tmp_path / "runner", tmp_path / "reader"  # no home or config in common
    runner.mkdir()
    reader.mkdir()
    (runner / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    url = with_password(fresh_postgres_url)
    server.script(
        tool_call("task", SPAWN, when=lambda r: not is_child(r)),
        text("The survey found 3 modules.", when=is_child),
        text("Survey: 3 modules.", when=lambda r: not is_child(r)),
    )
    run = kernos(runner, "run", "survey it", env={**server.env(), "KERNOS_STORE_URL": url})
    assert run.returncode == 0, run.stderr + logs(runner)
    assert run.stdout == "Survey: 3 modules.\n"
    assert not (runner / ".kernos" / "kernos.db").exists()  # nothing went to SQLite

    listed = kernos(reader, "tasks", "list", "--json", env={"KERNOS_STORE_URL": url})
    assert listed.returncode == 0, listed.stderr
    (task,) = json.loads(listed.stdout)["tasks"]
    assert (task["name"], task["status"]) == ("survey", "completed")
    shown = kernos(reader, "tasks", "output", task["id"], env={"KERNOS_STORE_URL": url})
    assert "The survey found 3 modules." in shown.stdout
    assert PASSWORD not in run.stderr + listed.stderr + shown.stdout + shown.stderr


def test_store_url_in_the_config_file(tmp_path: Path, fresh_postgres_url: str) -> None:
    (tmp_path / "kernos.toml").write_text(
        f'[store]\nurl = "{with_password(fresh_postgres_url)}"\n', encoding="utf-8"
    )
    listed = kernos(tmp_path, "-v", "tasks", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "(no tasks)\n"
    assert not (tmp_path / ".kernos" / "kernos.db").exists()
    # -v names the store, without the password
    assert listed.stderr.startswith(f"store: {fresh_postgres_url} (PostgreSQL, [store] url in ")
    assert PASSWORD not in listed.stderr


def test_the_environment_wins_over_the_config_file(tmp_path: Path, fresh_postgres_url: str) -> None:
    (tmp_path / "kernos.toml").write_text('[store]\nurl = "mysql://x@h/db"\n', encoding="utf-8")
    listed = kernos(tmp_path, "-v", "tasks", "list", env={"KERNOS_STORE_URL": fresh_postgres_url})
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.startswith(f"store: {fresh_postgres_url} (PostgreSQL, KERNOS_STORE_URL)")


def test_an_unknown_scheme_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = kernos(tmp_path, "tasks", "list", env={"KERNOS_STORE_URL": "mysql://u:pw123456@h/db"})
    assert bad.returncode == 2
    assert bad.stderr == (
        "error: (environment): KERNOS_STORE_URL: unknown scheme 'mysql://' (the store takes "
        "postgresql://); set it to postgresql://user:password@host:port/database, or unset it "
        "to use SQLite\n"
    )
    (tmp_path / "kernos.toml").write_text('[store]\nurl = "sqlite:///x.db"\n', encoding="utf-8")
    bad = kernos(tmp_path, "tasks", "list")
    assert bad.returncode == 2
    assert bad.stderr.startswith(f"error: {tmp_path / 'kernos.toml'}: store.url: unknown scheme")
    assert len(bad.stderr.splitlines()) == 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens there once the socket is closed


def test_a_server_that_is_down_is_one_line_and_exit_2(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    url = f"postgresql://kernos:{PASSWORD}@127.0.0.1:{_closed_port()}/kernos"
    shown = url.replace(f":{PASSWORD}", "")
    for args in (["tasks", "list"], ["run", "hello"]):
        down = kernos(tmp_path, *args, env={**server.env(), "KERNOS_STORE_URL": url})
        assert down.returncode == 2, down.stderr
        (line,) = down.stderr.splitlines()
        assert line.startswith(f"error: {shown}: cannot use this PostgreSQL store (connection ")
        assert "Connection refused" in line
        assert line.endswith("or unset both to use the SQLite store")
        assert PASSWORD not in line
    assert server.requests == []  # the run stopped before asking the model anything
