"""``kernos worker --grace``: a stopping worker's clean-up is bounded. Past the grace
it prints every thread's stack, where it was waiting, and exits 1, as a kill would leave it: a
fleet's rolling restart never waits on a worker that cannot finish its clean-up."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from test_dbos import use_dbos
from test_dbos_postgres import KERNOS
from tests import _wait as wait
from tests.conftest import Worker

from kernos.testing import FakeOpenAIServer


def worker_env(project: Path, server: FakeOpenAIServer, store_url: str | None) -> dict[str, str]:
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(project / ".kernos")}
    env.pop("KERNOS_TASK_ENGINE", None)
    if store_url is not None:
        env["KERNOS_STORE_URL"] = store_url
    return env


@pytest.mark.parametrize("grace", ["soon", "0", "-3s"])
def test_a_grace_that_is_not_a_duration_is_refused_before_anything_starts(
    project: Path, server: FakeOpenAIServer, grace: str
) -> None:
    done = subprocess.run(
        [KERNOS, "worker", "--grace", grace], cwd=project, capture_output=True, text=True,
        env=worker_env(project, server, None), timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--grace" in done.stderr and '"30s"' in done.stderr
    assert "executing" not in done.stderr


@pytest.mark.slow  # a real `kernos worker` on PostgreSQL, stopped past its grace
def test_a_clean_up_that_outlasts_the_grace_prints_where_it_waits_and_exits_1(
    project: Path,
    server: FakeOpenAIServer,
    fresh_postgres_url: str,
    worker: Callable[..., Worker],
) -> None:
    """The worker's executor row is locked by another connection, so retiring it blocks; the
    worker stops 2 s after SIGTERM with every thread's stack on stderr."""
    use_dbos(project, heartbeat="60")  # one beat, at its start: none waits on the lock before
    stopping = worker(project, worker_env(project, server, fresh_postgres_url), "--grace", "2s")
    stopping.wait_line("executing")
    mine = f"%:{stopping.pid}"
    with psycopg.connect(fresh_postgres_url, autocommit=True) as probe:
        query = "SELECT id FROM task_executors WHERE id LIKE %s"
        # its first beat is on its way
        wait.wait_for(lambda: probe.execute(query, (mine,)).fetchall(), "the worker's beat")
    with psycopg.connect(fresh_postgres_url) as other:
        rows = other.execute(query + " FOR UPDATE", (mine,)).fetchall()
        assert len(rows) == 1  # held until this block ends: the worker's retire waits
        sent = time.monotonic()
        errors = "\n".join(stopping.stop(signal.SIGTERM, timeout=60))
        took = time.monotonic() - sent
    assert stopping.proc.returncode == 1, errors
    assert "worker: stopping (its clean-up may take 2 s)" in errors
    assert "Timeout (0:00:02)!" in errors and "most recent call first" in errors
    assert "retire" in errors  # where it waited
    assert took < 30
