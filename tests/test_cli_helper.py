"""``tests._cli.kernos`` (a fork of a pre-warmed process) gives what ``subprocess.run`` gives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer, text
from tests._cli import KERNOS, _zygote, kernos
from tests._wait import wait_for
from tests.mcp.conftest import recorder_config


def both(monkeypatch: pytest.MonkeyPatch, *args: str, **kw: object) -> list[tuple[object, ...]]:
    """The result of ``kernos ARGS`` forked, then as a plain subprocess."""
    results = []
    for fork in ("1", "0"):
        monkeypatch.setenv("KERNOS_TEST_FORK", fork)
        done = kernos(*args, **kw)  # type: ignore[arg-type]
        results.append((done.returncode, done.stdout, done.stderr))
    return results


def test_help_and_bad_usage_are_the_same_forked_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forked, plain = both(monkeypatch, "--help", cwd=tmp_path)
    assert forked == plain
    assert forked[0] == 0 and "Usage: kernos" in str(forked[1])
    forked, plain = both(monkeypatch, "run", cwd=tmp_path)
    assert forked == plain
    assert forked[0] == 2 and "Missing argument" in str(forked[2])


def test_a_run_reading_stdin_is_the_same_forked_or_not(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.script(text("Read it.", when="summarise this", repeat=True))
    env = {**os.environ, **server.env()}
    forked, plain = both(
        monkeypatch,
        "run", "-", "-m", "openai-chat:x",
        cwd=tmp_path, env=env, input="summarise this\nplease",
    )  # fmt: skip
    assert forked[0] == 0, forked[2]
    assert forked[:2] == plain[:2] == (0, "Read it.\n")
    assert server.requests[0] == server.requests[1]


def test_the_command_gets_its_cwd_and_env(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text("")
    home = tmp_path / "elsewhere"
    done = kernos(
        "--verbose", "config", "check", cwd=tmp_path, env={**os.environ, "KERNOS_HOME": str(home)}
    )
    assert done.returncode == 0, done.stderr
    assert f"store: {home / 'kernos.db'} (KERNOS_HOME); config: {tmp_path / 'kernos.toml'}" in (
        done.stderr
    )


def test_a_timeout_kills_the_commands_group_and_raises(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.delay = 60
    server.script(text("never", repeat=True))
    env = {**os.environ, **server.env()}
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        kernos("run", "hi", "-m", "openai-chat:x", cwd=tmp_path, env=env, timeout=3)
    assert raised.value.cmd == [KERNOS, "run", "hi", "-m", "openai-chat:x"]
    if os.environ.get("KERNOS_TEST_FORK") != "0":
        assert not Path(f"/proc/{raised.value.pid}").exists()  # killed and reaped


def test_an_env_that_changes_the_interpreters_start_runs_as_a_plain_subprocess() -> None:
    zygote = _zygote()
    assert zygote.can_run(dict(os.environ))
    assert zygote.can_run({**os.environ, "KERNOS_HOME": "/elsewhere", "HOME": "/elsewhere"})
    assert not zygote.can_run({**os.environ, "PYTHONPATH": "/elsewhere"})
    assert not zygote.can_run(
        {**os.environ, "LC_ALL": "C"} if os.environ.get("LC_ALL") != "C" else {}
    )
    # and then it still runs, as subprocess.run would
    done = kernos(
        "--version", cwd=Path.cwd(), env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    )
    assert done.returncode == 0 and done.stdout.startswith("kernos ")


def test_a_module_in_the_cwd_shadows_nothing_the_command_imports_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `kernos compress --help` imports gzip, which the zygote has not imported; a fresh `kernos`
    # has its script's directory first on sys.path, never the cwd
    (tmp_path / "gzip.py").write_text("raise SystemExit('the cwd shadowed gzip')\n")
    forked, plain = both(monkeypatch, "compress", "--help", cwd=tmp_path)
    assert forked == plain
    assert forked[0] == 0 and "Usage: kernos compress" in str(forked[1])


def test_a_command_starting_a_stdio_mcp_server_is_the_same_forked_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the command waits for a process it started: with SIGCHLD ignored (as no fresh process has
    # it) that process would be reaped before the command could wait for it
    (tmp_path / "kernos.toml").write_text(recorder_config("rec", tmp_path / "calls.jsonl"))
    forked, plain = both(monkeypatch, "tools", "--json", cwd=tmp_path)
    assert forked == plain
    assert forked[0] == 0 and "rec__lookup" in str(forked[1])


def test_a_relative_cwd_is_relative_to_the_test_processs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "kernos.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    done = kernos("--verbose", "config", "check", cwd="project")
    assert done.returncode == 0, done.stderr
    assert f"config: {tmp_path / 'project' / 'kernos.toml'}" in done.stderr


def test_a_missing_cwd_raises_as_subprocess_run_does(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        kernos("--version", cwd=tmp_path / "missing")


def _grandchildren(pid: int) -> list[int]:
    """The processes whose parent's parent is ``pid`` (the zygote's commands)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return [p for p, parent in parents.items() if parents.get(parent) == pid]


def test_a_command_killed_by_a_signal_has_a_negative_returncode(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    if os.environ.get("KERNOS_TEST_FORK") == "0":
        pytest.skip("finds the command among the zygote's grandchildren")
    gate = threading.Event()
    server.script(text("late", hold=gate))
    env = {**os.environ, **server.env()}
    zygote = _zygote()
    done: list[subprocess.CompletedProcess[str]] = []
    runner = threading.Thread(
        target=lambda: done.append(
            kernos("run", "hi", "-m", "openai-chat:x", cwd=tmp_path, env=env, timeout=60)
        )
    )
    runner.start()
    try:
        wait_for(lambda: server.requests, "the run's model request")
        (pid,) = _grandchildren(zygote.process.pid)
        os.kill(pid, signal.SIGKILL)
        runner.join(60)
    finally:
        gate.set()
        runner.join(60)
    assert done[0].returncode == -signal.SIGKILL
