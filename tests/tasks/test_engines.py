"""The whole task suite again on the DBOS engine (``KERNOS_TASK_ENGINE=dbos``, DBOS on SQLite):
every state, text and tool of spec/tasks.md holds on both engines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
@pytest.mark.timeout(900)  # the whole task suite, serially (several minutes)
@pytest.mark.skipif(
    os.environ.get("KERNOS_TASK_ENGINE") == "dbos", reason="this run is the DBOS run already"
)
def test_the_task_suite_passes_on_the_dbos_engine() -> None:
    files = sorted(str(p) for p in HERE.glob("test_*.py") if p.name != Path(__file__).name)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout=120", *files],
        env={**os.environ, "KERNOS_TASK_ENGINE": "dbos"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
