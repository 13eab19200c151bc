"""The whole task suite again on the DBOS engine (``KERNOS_TASK_ENGINE=dbos``, DBOS on SQLite):
every state, text and tool of the task tools holds on both engines.

One test per file, so pytest-xdist spreads the files over its workers (one serial run of every
file took ~10 minutes on one core). The ``test_dbos*`` files run on DBOS already."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FILES = sorted(
    p.name
    for p in HERE.glob("test_*.py")
    if p.name != Path(__file__).name and not p.name.startswith("test_dbos")
)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(
    os.environ.get("KERNOS_TASK_ENGINE") == "dbos", reason="this run is the DBOS run already"
)
@pytest.mark.parametrize("name", FILES)
def test_the_task_suite_passes_on_the_dbos_engine(name: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout=120",
         str(HERE / name)],
        env={**os.environ, "KERNOS_TASK_ENGINE": "dbos"},
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
