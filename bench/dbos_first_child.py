"""How long a first run's first child waits on the DBOS engine.

Each trial is a process of its own with a fresh home (no ``dbos.sqlite`` yet: the model's queue
is new to the database) or, with ``--again``, a home an earlier trial left (the queue exists).
It spawns one background child and measures, on the clock of that process:

* ``spawn``: from a spawn right after DBOS's launch to the child's first model request at a
  local model server (the worst case: a spawn later finds the queue already polled);
* ``boot``: from the engine's creation (DBOS launches in the background from then) to it.

Run: ``.venv/bin/python bench/dbos_first_child.py [--trials N] [--again]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CONFIG = """
default_model = "openai-chat:test"

[agents.main]
instructions = "MAIN-AGENT"

[agents.explore]
description = "Read-only research"
instructions = "EXPLORE-AGENT"

[tasks]
engine = "dbos"
concurrency = 5
"""


async def _trial(home: Path) -> dict[str, float]:
    from kernos.runtime import Runtime, load_config
    from kernos.tasks import TaskManager
    from kernos.testing import FakeOpenAIServer, text

    seen: list[float] = []

    def child(request: dict[str, Any]) -> bool:
        if "EXPLORE-AGENT" in json.dumps(request["messages"][0]) and not seen:
            seen.append(time.monotonic())
        return True

    with FakeOpenAIServer(text("done", when=child, repeat=True)) as server:
        os.environ.update(server.env())
        os.environ["KERNOS_HOME"] = str(home / ".kernos")
        runtime = Runtime(load_config(cwd=home))
        created = time.monotonic()
        manager = TaskManager(runtime)
        try:
            session = runtime.session("main", record_turns=False)
            session.add_tools(manager.tools_for(session))
            params = {"prompt": "Survey.", "subagent_type": "explore"}
            resolution = manager.resolve(params, session)
            await manager.engine.ready()  # type: ignore[attr-defined]  # launched: spawn now
            spawned = time.monotonic()
            (record,) = manager.spawn(session, resolution, background=True)
            deadline = time.monotonic() + 60
            while not seen and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            while record.status.value in ("pending", "running") and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        finally:
            await manager.aclose(wait=True)
            runtime.close()
    if not seen:
        raise SystemExit("the child never sent a request")
    return {"spawn": seen[0] - spawned, "boot": seen[0] - created}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--again", action="store_true", help="reuse one home (queue exists)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a trial in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(_trial(Path(args.one)))))
        return
    results: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as shared:
        for n in range(args.trials + (1 if args.again else 0)):
            with tempfile.TemporaryDirectory() as fresh:
                home = Path(shared if args.again else fresh)
                (home / "kernos.toml").write_text(CONFIG, encoding="utf-8")
                out = subprocess.run(
                    [sys.executable, __file__, "--one", str(home)],
                    check=True, capture_output=True, text=True,
                )  # fmt: skip
                if args.again and n == 0:
                    continue  # the run that created the queue
                results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    for key in ("spawn", "boot"):
        values = sorted(r[key] * 1000 for r in results)
        print(
            f"{key:5}: median {statistics.median(values):6.0f} ms, "
            f"min {values[0]:6.0f}, max {values[-1]:6.0f} ({len(values)} trials)"
        )


if __name__ == "__main__":
    main()
