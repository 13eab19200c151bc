"""A pathological regex from the model never freezes `kernos run`: SIGTERM during the search ends
the run with 143, and ``--timeout`` with 124, each within 2 s (the search itself would take
seconds; with Python's ``re`` it would never end, holding the GIL against every signal handler)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests._wait import wait_for
from tests.conftest import KERNOS

#: long enough that "(a+)+$" backtracks for seconds even in the regex package (34 is not)
SLOW = "a" * 2000 + "!\n"


@pytest.fixture
def run_search(server: FakeOpenAIServer, tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Starts `kernos run` whose model calls search_files with "(a+)+$" over :data:`SLOW`;
    the process group is killed at the end whatever happened."""
    (tmp_path / "slow.txt").write_text(SLOW)
    server.script(
        tool_call("search_files", {"pattern": "(a+)+$"}),
        text("searched"),
    )
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def start(server: FakeOpenAIServer, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(tmp_path / ".kernos")}
    return subprocess.Popen(
        [KERNOS, "run", "find the a's", "-m", "openai-chat:x", "-q", *args],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def wait_for_first_request(server: FakeOpenAIServer, proc: subprocess.Popen[str]) -> float:
    """When the model was first asked (the run's clock started before that)."""
    wait_for(lambda: server.requests, "the model to be asked", alive=[proc])
    return time.monotonic()


def wait_until_searching(proc: subprocess.Popen[str]) -> None:
    """Until the process has spent a second of CPU after the tool call was answered: the
    search is under way (nothing else in the run is busy once the model has answered)."""
    watched = psutil.Process(proc.pid)
    before = sum(watched.cpu_times()[:2])
    searching = lambda: sum(watched.cpu_times()[:2]) - before >= 1.0  # noqa: E731
    wait_for(searching, "the search to start", alive=[proc])


def wait_for_exit(proc: subprocess.Popen[str]) -> float:
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("kernos run did not stop within 60 s") from None
    return time.monotonic()


def test_sigterm_during_a_pathological_search_exits_143_within_2_seconds(
    server: FakeOpenAIServer, tmp_path: Path, run_search: list[subprocess.Popen[str]]
) -> None:
    proc = start(server, tmp_path)
    run_search.append(proc)
    wait_for_first_request(server, proc)
    wait_until_searching(proc)
    assert len(server.requests) == 1  # the search has not answered yet
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    ended = wait_for_exit(proc)
    _, errors = proc.communicate()
    assert proc.returncode == 143, errors
    assert ended - sent < 2.0, f"exit took {ended - sent:.1f} s after SIGTERM"


def test_timeout_during_a_pathological_search_exits_124_within_2_seconds(
    server: FakeOpenAIServer, tmp_path: Path, run_search: list[subprocess.Popen[str]]
) -> None:
    proc = start(server, tmp_path, "--timeout", "4s")
    run_search.append(proc)
    asked = wait_for_first_request(server, proc)  # the 4 s began before this
    ended = wait_for_exit(proc)
    _, errors = proc.communicate()
    assert proc.returncode == 124, errors
    assert ended - (asked + 4.0) < 2.0, f"exit came {ended - asked - 4.0:.1f} s after the deadline"
