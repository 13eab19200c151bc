"""Benchmark of team mail latency (not a test): ``.venv/bin/python bench/teams.py [ENGINE...]``
(ENGINE: ``local``, ``dbos`` or ``dbos-pg``; default all three).

How long a message takes from ``team_send`` to an idle member (finished, so revived by the mail)
sending its next model request, with 2 and 8 members:

- ``local``: the local engine, every member in this process;
- ``dbos``: the DBOS engine on SQLite, the lead's own process executing the members;
- ``dbos-pg``: the DBOS engine on a real PostgreSQL (started here, as the tests start it,
  tests/_postgres.py) with 2 ``kernos worker`` processes executing the members and the lead in
  this process (``run_executes = false``); ``[tasks] concurrency`` is the member count, so each
  worker's share is half the team. Which worker ran each member's runs is printed.

The model is ``kernos.testing.FakeOpenAIServer`` answering at once over HTTP; the clock stops when
the recipient's request reaches the server. Prints the median and the 95th percentile in
milliseconds; the issue's target is under a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager, TaskStatus
from kernos.tasks._team_args import Seat
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

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench")]  # _postgres, tasks_dbos
KERNOS = str(Path(sys.executable).with_name("kernos"))


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


async def measure(engine: str, members: int, store_url: str | None = None) -> list[float]:
    """The latency of each of :data:`ROUNDS` messages, in seconds (``store_url``: PostgreSQL,
    and 2 workers executing the members)."""
    with tempfile.TemporaryDirectory() as home, FakeOpenAIServer() as server:
        config = CONFIG + ('engine = "dbos"\n' if engine.startswith("dbos") else "")
        if store_url is not None:
            config = config.replace("concurrency = 0", f"concurrency = {members}")
            config += "run_executes = false\nheartbeat = 0.5\n"
        Path(home, "kernos.toml").write_text(config, encoding="utf-8")
        os.environ.update(server.env())
        os.environ["KERNOS_HOME"] = str(Path(home, ".kernos"))
        os.environ.pop("KERNOS_STORE_URL", None)
        workers: list[subprocess.Popen[str]] = []
        if store_url is not None:
            os.environ["KERNOS_STORE_URL"] = store_url
            workers = start_workers(Path(home), 2)
        seen: dict[str, float] = {}
        arrivals(server, seen)
        try:
            return await _rounds(Path(home), members, seen)
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.communicate(timeout=60)
            if store_url is not None:
                os.environ.pop("KERNOS_STORE_URL", None)
                ran_on(store_url, workers)


def start_workers(home: Path, count: int) -> list[subprocess.Popen[str]]:
    """``count`` ``kernos worker`` processes on this process's environment, each up."""
    from tasks_dbos import _ready

    workers = [
        subprocess.Popen(
            [KERNOS, "worker"], cwd=home, env=dict(os.environ), stderr=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]
    for worker in workers:
        _ready(worker)
    return workers


def ran_on(store_url: str, workers: list[subprocess.Popen[str]]) -> None:
    """Print which worker ran each member's last run."""
    from kernos.runtime import Store
    from kernos.tasks import TaskStore

    store = Store(store_url)
    try:
        rows = TaskStore(store).recent()
    finally:
        store.close()
    names = {str(w.pid): f"worker {n + 1}" for n, w in enumerate(workers)}
    by: dict[str, list[str]] = {}
    for row in rows:
        who = names.get(str(row["executor"] or "").rpartition(":")[2], str(row["executor"]))
        by.setdefault(who, []).append(str(row["name"]))
    print("        ran on: " + "; ".join(f"{w}: {', '.join(sorted(n))}" for w, n in by.items()))


async def _rounds(home: Path, members: int, seen: dict[str, float]) -> list[float]:
    runtime = Runtime(load_config(cwd=home))
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
        deadline = time.perf_counter() + 60
        while str(round_) not in seen:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"message {round_} never reached its member")
            await asyncio.sleep(0.001)
        latencies.append(seen[str(round_)] - start)
        while record.status != TaskStatus.COMPLETED:
            await manager.change_event().wait()
    await manager.aclose(wait=True)
    runtime.close()
    return latencies


def main() -> None:
    engines = sys.argv[1:] or ["local", "dbos", "dbos-pg"]
    print(f"team mail to an idle member, until its next model request ({ROUNDS} messages)")
    print(f"{'engine':<8}{'members':>8}{'median ms':>11}{'p95 ms':>9}")
    with contextlib.ExitStack() as stack:
        pg: Any = None
        for engine in engines:
            for members in (2, 8):
                store_url = None
                if engine == "dbos-pg":
                    from _postgres import PostgresServer, create_database

                    pg = pg or stack.enter_context(PostgresServer())
                    store_url = create_database(pg.url)  # a fresh database each time
                found = sorted(asyncio.run(measure(engine, members, store_url)))
                p95 = found[min(len(found) - 1, int(len(found) * 0.95))]
                median = statistics.median(found)
                print(f"{engine:<8}{members:>8}{median * 1000:>11.1f}{p95 * 1000:>9.1f}")


if __name__ == "__main__":
    main()
