"""The suite's one wait (tests/_wait.py) and its worker fixture (tests/conftest.py) say on
failure what was awaited and what was last seen: a flake shows its cause."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests._wait import until, wait_for
from tests.conftest import Worker


def test_a_wait_that_times_out_names_what_it_waited_for_and_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"timed out waiting for the count \(last: 0\)"):
        wait_for(lambda: 0, "the count", timeout=0.2)
    probes: list[int] = []
    counted = lambda: probes.append(1) or (len(probes) >= 3 and len(probes))  # noqa: E731
    assert wait_for(counted, "the third probe") == 3


async def test_until_runs_the_loop_and_takes_a_coroutine_probe() -> None:
    probes: list[int] = []

    async def probe() -> int | None:
        probes.append(1)
        return len(probes) if len(probes) >= 3 else None

    assert await until(probe, "the third probe") == 3
    with pytest.raises(AssertionError, match=r"timed out waiting for nothing \(last: None\)"):
        await until(lambda: None, "nothing", timeout=0.1)


def test_a_watched_process_that_ends_fails_the_wait_at_once_with_what_it_said() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stderr.write('broke: ' + 'no store'); sys.exit(3)"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with pytest.raises(AssertionError) as failed:
        wait_for(lambda: False, "a line", alive=[proc])
    assert "exited 3" in str(failed.value) and "broke: no store" in str(failed.value)
    assert "waiting for a line" in str(failed.value)


def test_a_worker_that_ends_before_its_line_fails_the_wait_with_what_it_printed(
    worker: Callable[..., Worker], tmp_path: Path
) -> None:
    script = "import sys; print('starting', file=sys.stderr); sys.exit(4)"
    ended = worker(tmp_path, {}, command=[sys.executable, "-c", script])
    with pytest.raises(AssertionError) as failed:
        ended.wait_line("executing", timeout=20)
    assert "it exited 4" in str(failed.value) and "starting" in str(failed.value)
    assert ended.stop() == ["starting"]


def test_a_worker_s_lines_are_read_as_it_prints_them_and_all_are_kept(
    worker: Callable[..., Worker], tmp_path: Path
) -> None:
    script = (
        "import signal, sys\n"
        "print('a', file=sys.stderr, flush=True)\n"
        "print('ready b', file=sys.stderr, flush=True)\n"
        "signal.pause()  # until the SIGTERM\n"
    )
    talking = worker(tmp_path, {}, command=[sys.executable, "-c", script])
    assert talking.wait_line("ready") == "ready b"
    assert talking.stop() == ["a", "ready b"]
    assert talking.proc.returncode == -15


def test_a_worker_the_test_leaves_running_is_stopped_after_it_its_pipe_read_by_one_reader(
    worker: Callable[..., Worker], tmp_path: Path
) -> None:
    script = "import signal, sys\nprint('up', file=sys.stderr, flush=True)\nsignal.pause()\n"
    left = worker(tmp_path, {}, command=[sys.executable, "-c", script])
    left.wait_line("up")  # the ``procs`` fixture stops it (SIGTERM, waited for)
