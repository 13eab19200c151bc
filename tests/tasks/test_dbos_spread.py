"""A burst of DBOS children spreads over the executors that serve its queue: each
model's limit is split among the live executors of its queue (``[tasks] spread``), so the first
worker to poll does not take the whole burst while the others idle; a lone worker still uses the
whole limit, and the survivors' shares grow once a worker died."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tasks_helpers import agent_is, messages, text_of
from test_dbos import use_dbos
from test_dbos_postgres import KERNOS, CountingServer, counting_server
from tests import _wait as wait
from tests.conftest import Worker

from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager
from kernos.tasks._dbos import fair_share, queue_shares
from kernos.tasks._store import MIGRATIONS, TaskStore
from kernos.testing import FakeOpenAIServer, text, tool_call

QUEUE = "kernos.openai-chat:test"


# -- the rule ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("limit", "servers", "share"),
    [
        (60, 1, None),  # a lone executor: the whole limit
        (60, 0, None),
        (60, 3, 20),
        (60, 4, 15),
        (5, 3, 2),  # rounded up: the global limit still holds the sum at 5
        (2, 3, 1),  # never 0: each executor can run one
        (None, 3, None),  # unbounded
        (0, 3, None),
    ],
)
def test_a_queue_s_limit_is_split_evenly_among_its_executors(
    limit: int | None, servers: int, share: int | None
) -> None:
    assert fair_share(limit, servers) == share


def test_an_executor_counts_only_for_the_queues_it_serves() -> None:
    serving = [None, ["kernos.a"], ["kernos.a", "kernos.b"], []]
    assert queue_shares({"kernos.a": 9, "kernos.b": 9, "kernos.c": 9}, serving) == {
        "kernos.a": 3,  # every-queue, a, a+b
        "kernos.b": 5,  # every-queue, a+b
        "kernos.c": None,  # the every-queue one alone
    }


# -- the store: which executors serve which queues -----------------------------------------------
def test_the_served_queues_migration_applies_to_an_existing_store_file(tmp_path: Path) -> None:
    """A store of the previous version (tasks 1-6) with an executor in it: opening it adds the
    column, the old executor serves every queue, and a beat records what one serves."""
    from kernos.runtime import Store
    from kernos.runtime._store._store import _RUNTIME_MIGRATIONS

    path = tmp_path / "kernos.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE schema_migrations (namespace TEXT NOT NULL, version INTEGER NOT NULL,"
            " name TEXT NOT NULL, applied_at REAL NOT NULL, PRIMARY KEY (namespace, version))"
        )
        for namespace, migrations in (("runtime", _RUNTIME_MIGRATIONS), ("tasks", MIGRATIONS[:6])):
            for version, name, sql in migrations:
                db.executescript(sql)
                db.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, ?, 0)", (namespace, version, name)
                )
        db.execute(
            "INSERT INTO task_executors (id, beat_at, started_at) VALUES ('old:1', ?, 0)",
            (time.time(),),
        )
    store = Store(path)
    tasks = TaskStore(store)
    try:
        assert store.versions("tasks") == [1, 2, 3, 4, 5, 6, 7, 8, 9]
        tasks.beat("some:2", ["kernos.b", "kernos.a"])
        tasks.beat("none:3", [])
        assert tasks.serving(60) == {"old:1": None, "some:2": ["kernos.a", "kernos.b"],
                                     "none:3": []}  # fmt: skip
        tasks.beat("some:2")  # a beat says it again: now every queue
        assert tasks.serving(60)["some:2"] is None
    finally:
        store.close()


def test_only_executors_that_beat_lately_count_and_a_bad_column_means_every_queue(
    store_target: str,
) -> None:
    from kernos.runtime import Store

    store = Store(store_target)
    tasks = TaskStore(store)
    try:
        tasks.beat("live:1", ["kernos.a"])
        tasks.beat("gone:2", ["kernos.a"])
        tasks.beat("odd:3")
        with store.transaction() as conn:
            conn.execute("UPDATE task_executors SET beat_at = 0 WHERE id = 'gone:2'")
            conn.execute("UPDATE task_executors SET queues = '{\"x\": 1' WHERE id = 'odd:3'")
        assert tasks.serving(60) == {"live:1": ["kernos.a"], "odd:3": None}
        tasks.retire("live:1")
        assert tasks.serving(60) == {"odd:3": None}
    finally:
        store.close()


# -- the reaper writes the shares (SQLite, in process) -------------------------------------------
@pytest.mark.parametrize(("spread", "share"), [("true", 2), ("false", None)])
async def test_the_reaper_shares_each_queue_among_the_live_executors_that_serve_it(
    project: Path, server: FakeOpenAIServer, spread: str, share: int | None
) -> None:
    """This engine (holding the reaper lease) and two other live executors of the queue split
    its limit of 5: 2 each, written in the queue's row that every executor's DBOS reads; an
    executor of other queues and a silent one do not count. ``spread = false``: no share."""
    from dbos import DBOS

    use_dbos(project, heartbeat="60", spread=spread)  # one beat: this test calls the next
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    engine: Any = manager.engine
    store: TaskStore = engine.scheduler.store
    try:
        await engine.ready()
        # the engine's own first beat shares the queues too: over before this test's beats
        await asyncio.wait_for(engine.beaten.wait(), 60)
        queue = await DBOS.retrieve_queue_async(QUEUE)
        assert queue is not None
        assert await queue.get_worker_concurrency_async() is None  # alone
        store.beat("worker:1")  # every queue
        store.beat("worker:2", [QUEUE])
        store.beat("worker:3", ["kernos.openai-chat:other"])
        store.beat("worker:4")
        with store.store.transaction() as conn:  # silent for longer than three beats
            conn.execute("UPDATE task_executors SET beat_at = 0 WHERE id = 'worker:4'")
        await engine._spread()
        assert await queue.get_worker_concurrency_async() == share
        store.retire("worker:1")
        store.retire("worker:2")
        await engine._spread()
        assert await queue.get_worker_concurrency_async() is None  # alone again: all of it
    finally:
        await manager.aclose(wait=False)
        runtime.close()


async def test_a_process_that_registers_the_queues_keeps_the_shares(
    project: Path, server: FakeOpenAIServer
) -> None:
    """A ``kernos run`` that executes nothing registers its queues as it starts (the queue's
    row, with its share, is every executor's): it writes the share among the two live workers,
    3 of 5, not "no share", which would let the first worker to poll take a whole burst."""
    from dbos import DBOS

    use_dbos(project, heartbeat="60", run_executes="false")  # no reaper here: never holds it
    runtime = Runtime(load_config(cwd=project))
    store = TaskStore(runtime.store)
    store.beat("worker:1")
    store.beat("worker:2", [QUEUE])
    manager = TaskManager(runtime)
    try:
        await manager.engine.ready()  # type: ignore[attr-defined]
        queue = await DBOS.retrieve_queue_async(QUEUE)
        assert queue is not None
        assert await queue.get_worker_concurrency_async() == 3
    finally:
        await manager.aclose(wait=False)
        runtime.close()


# -- real workers on PostgreSQL ------------------------------------------------------------------
class PerChild(CountingServer):
    """Counts child requests in flight, and records each arrival and end with the child's
    number (its prompt is ``CHILD-N: ...``), so the peak per executor can be read afterwards."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.log: list[tuple[int, int]] = []  # (+1 or -1, child number), in order
        self.which = threading.local()

    def _answer(self, request: dict[str, Any], authorization: str) -> Any:
        if agent_is("EXPLORE-AGENT")(request):
            prompts = [text_of(m) for m in messages(request) if m.get("role") == "user"]
            found = re.search(r"CHILD-(\d+):", " ".join(prompts))
            if found:
                with self.lock:
                    self.log.append((1, int(found[1])))
                self.which.child = int(found[1])
        return super()._answer(request, authorization)

    def done(self) -> None:
        child = getattr(self.which, "child", None)
        if child is not None:
            self.which.child = None
            with self.lock:
                self.log.append((-1, child))
        super().done()

    def peaks(self, executor_of: dict[int, str]) -> dict[str, int]:
        """The most requests in flight at once from each executor's children."""
        now: dict[str, int] = {}
        peak: dict[str, int] = {}
        for step, child in self.log:
            who = executor_of[child]
            now[who] = now.get(who, 0) + step
            peak[who] = max(peak.get(who, 0), now[who])
        return peak


@pytest.fixture
def per_child(monkeypatch: pytest.MonkeyPatch) -> Iterator[PerChild]:
    with counting_server(monkeypatch, factory=PerChild) as fake:
        assert isinstance(fake, PerChild)
        yield fake


def fleet_config(project: Path, concurrency: int) -> None:
    path = project / "kernos.toml"
    config = path.read_text(encoding="utf-8")
    config = config.replace("concurrency = 5", f"concurrency = {concurrency}")
    path.write_text(config + "run_executes = false\nheartbeat = 0.5\n", encoding="utf-8")


def fleet_env(project: Path, server: FakeOpenAIServer, store_url: str | None) -> dict[str, str]:
    """The processes' environment: the store at ``store_url`` (``None``: SQLite under the
    project's home, the engine the project's config names)."""
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(project / ".kernos")}
    env.pop("KERNOS_TASK_ENGINE", None)  # auto: DBOS, when the store is PostgreSQL
    env.pop("KERNOS_STORE_URL", None)
    if store_url is not None:
        env["KERNOS_STORE_URL"] = store_url
    return env


def start_workers(
    project: Path, env: dict[str, str], count: int, worker: Callable[..., Worker]
) -> list[Worker]:
    """``count`` workers (the ``worker`` fixture), each up (its "executing" line)."""
    started = [worker(project, env) for _ in range(count)]
    for each in started:
        each.wait_line("executing", 120)
    return started


def share_of(store_url: str) -> int | None:
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=store_url, application_name="kernos")
    try:
        queue = client.retrieve_queue(QUEUE)
        assert queue is not None
        return queue.worker_concurrency
    finally:
        client.destroy()


def wait_share(store_url: str, share: int | None) -> None:
    wait.wait_for(lambda: share_of(store_url) == share, f"the queue's share to be {share}", 60)


def burst(
    project: Path, server: PerChild, env: dict[str, str], store_url: str, children: int
) -> dict[str, int]:
    """One ``kernos run`` spawns ``children`` background children at once (0.3 s each) and waits
    for them; every one completes. The peak of requests in flight per executor."""
    items = [{"prompt": f"CHILD-{n}: count to {n}."} for n in range(children)]
    batch = {"run_in_background": True, "subagent_type": "explore", "tasks": items}
    server.script(
        tool_call("task", batch, when=agent_is("MAIN-AGENT", "fan out")),
        text("Waiting.", when=agent_is("MAIN-AGENT", "Batch running.")),
        text("done", when=agent_is("EXPLORE-AGENT"), repeat=True),
        text("Noted.", when=agent_is("MAIN-AGENT", "task completion"), repeat=True),
    )
    run = subprocess.run(
        [KERNOS, "run", "fan out", "-q"], cwd=project, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    with psycopg.connect(store_url) as db:
        rows = db.execute("SELECT prompt, executor, status FROM tasks").fetchall()
    assert len(rows) == children
    assert {status for _, _, status in rows} == {"completed"}
    executor_of = {int(prompt.split(":")[0].removeprefix("CHILD-")): who for prompt, who, _ in rows}
    return server.peaks(executor_of)


@pytest.mark.postgres
@pytest.mark.slow
def test_a_burst_spreads_over_three_workers_each_within_its_share(
    project: Path,
    per_child: PerChild,
    fresh_postgres_url: str,
    worker: Callable[..., Worker],
) -> None:
    """Concurrency 6 over three workers: 2 each. A burst of 12 runs on all three, none of them
    with more than 2 requests in flight (before the shares, the first worker to poll took 6)."""
    fleet_config(project, 6)
    env = fleet_env(project, per_child, fresh_postgres_url)
    workers = start_workers(project, env, 3, worker)
    wait_share(fresh_postgres_url, 2)
    peaks = burst(project, per_child, env, fresh_postgres_url, 12)
    pids = sorted(str(w.pid) for w in workers)
    assert sorted(who.rpartition(":")[2] for who in peaks) == pids  # each worker ran some
    assert max(peaks.values()) <= 2, peaks
    assert 1 <= per_child.peak <= 6


@pytest.mark.postgres
@pytest.mark.slow
def test_a_dead_worker_s_share_goes_to_the_survivor_which_alone_uses_the_whole_limit(
    project: Path,
    per_child: PerChild,
    fresh_postgres_url: str,
    worker: Callable[..., Worker],
) -> None:
    """Two workers share a limit of 4 (2 each); one is killed (-9): within a few beats the
    survivor, alone, has no share of its own, and a burst of 8 runs 4 at a time on it."""
    fleet_config(project, 4)
    env = fleet_env(project, per_child, fresh_postgres_url)
    doomed, survivor = start_workers(project, env, 2, worker)
    wait_share(fresh_postgres_url, 2)
    doomed.kill()
    wait_share(fresh_postgres_url, None)
    peaks = burst(project, per_child, env, fresh_postgres_url, 8)
    assert [who.rpartition(":")[2] for who in peaks] == [str(survivor.pid)]
    assert list(peaks.values()) == [4]  # the whole limit, not its old share
    listed = subprocess.run(
        [KERNOS, "tasks", "list", "--json", "-n", "100"], cwd=project, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert len(json.loads(listed.stdout)["tasks"]) == 8
