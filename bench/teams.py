"""Benchmark of team mail latency (not a test): ``.venv/bin/python bench/teams.py``.

How long a message takes from ``team_send`` to an idle member (finished, so revived by the mail)
sending its next model request, with 2 and 8 members, on the local engine and on the DBOS engine
with the run's own process executing the members (SQLite; several workers are not measured
here). The model is ``kernos.testing.FakeOpenAIServer`` answering at once over HTTP; the clock
stops when the recipient's request reaches the server. Prints the median and the 95th
percentile in milliseconds; the issue's target is under a second.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager, TaskStatus
from kernos.tasks._teams import Seat
from kernos.testing import FakeOpenAIServer, text

CONFIG = """
default_model = "openai-chat:test"

[agents.main]
instructions = "MAIN-AGENT"

[categories.quick]
model = "openai-chat:test"
instructions = "MEMBER"

[tasks]
concurrency = 0
max_children = 0
team_max_turns = 0
"""

ROUNDS = 40


def arrivals(server: FakeOpenAIServer, seen: dict[str, float]) -> None:
    """Members answer at once; the arrival of each ``mail #N`` request is timed."""
    lock = threading.Lock()

    def timed(request: dict[str, Any]) -> bool:
        last = str((request.get("messages") or [{}])[-1].get("content") or "")
        if "mail #" in last:
            tag = last.rsplit("mail #", 1)[1].split()[0]
            with lock:
                seen.setdefault(tag, time.perf_counter())
        return True

    server.script(text("ok", when=timed, repeat=True))


async def measure(engine: str, members: int) -> list[float]:
    with tempfile.TemporaryDirectory() as home, FakeOpenAIServer() as server:
        config = CONFIG + (f'engine = "{engine}"\n' if engine == "dbos" else "")
        Path(home, "kernos.toml").write_text(config, encoding="utf-8")
        os.environ.update(server.env())
        os.environ["KERNOS_HOME"] = str(Path(home, ".kernos"))
        seen: dict[str, float] = {}
        arrivals(server, seen)
        runtime = Runtime(load_config(cwd=Path(home)))
        manager = TaskManager(runtime)
        lead = runtime.session("main", record_turns=False)
        lead.add_tools(manager.tools_for(lead))
        names = [f"m{n}" for n in range(members)]
        spawn = {
            "team": "bench",
            "category": "quick",
            "run_in_background": True,
            "tasks": [{"prompt": f"member {n}", "name": n} for n in names],
        }
        records = manager.spawn(lead, manager.resolve(spawn, lead))
        await manager.wait(records)
        seat = Seat(lead.session_id, "bench", "lead")
        latencies = []
        for round_ in range(ROUNDS):
            record = records[round_ % members]
            start = time.perf_counter()
            await manager.teams.send(seat, names[round_ % members], f"mail #{round_} go")
            while str(round_) not in seen:
                await asyncio.sleep(0.001)
            latencies.append(seen[str(round_)] - start)
            while record.status != TaskStatus.COMPLETED:
                await manager.change_event().wait()
        await manager.aclose(wait=True)
        runtime.close()
        return latencies


def main() -> None:
    engines = sys.argv[1:] or ["local", "dbos"]
    print(f"team mail to an idle member, until its next model request ({ROUNDS} messages)")
    print(f"{'engine':<8}{'members':>8}{'median ms':>11}{'p95 ms':>9}")
    for engine in engines:
        for members in (2, 8):
            found = sorted(asyncio.run(measure(engine, members)))
            p95 = found[min(len(found) - 1, int(len(found) * 0.95))]
            median = statistics.median(found)
            print(f"{engine:<8}{members:>8}{median * 1000:>11.1f}{p95 * 1000:>9.1f}")


if __name__ == "__main__":
    main()
