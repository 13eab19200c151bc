"""The DBOS task engine on a real PostgreSQL: three ``kernos worker`` processes and one
``kernos run`` share the queues; the model is a local server that counts requests in flight."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is, user_texts
from tests.conftest import Worker

from kernos.testing import FakeOpenAIServer, _server, text, tool_call

KERNOS = str(Path(sys.executable).with_name("kernos"))
CHILDREN = 12
pytestmark = [pytest.mark.postgres, pytest.mark.slow]


class CountingServer(FakeOpenAIServer):
    """Counts the child requests in flight (from arrival until the answer is sent)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.inflight = 0
        self.peak = 0
        self.counted = threading.local()
        self.lock = threading.Lock()

    def _answer(self, request: dict[str, Any], authorization: str) -> Any:
        if agent_is("EXPLORE-AGENT")(request):
            with self.lock:
                self.inflight += 1
                self.peak = max(self.peak, self.inflight)
            self.counted.yes = True
        return super()._answer(request, authorization)

    def done(self) -> None:
        if getattr(self.counted, "yes", False):
            self.counted.yes = False
            with self.lock:
                self.inflight -= 1


@contextmanager
def counting_server(
    monkeypatch: pytest.MonkeyPatch,
    host: str = "127.0.0.1",
    factory: type[CountingServer] = CountingServer,
) -> Iterator[CountingServer]:
    """A :class:`CountingServer` (or ``factory``'s) on ``host`` answering each request after
    0.3 s."""
    original = _server._Handler.do_POST

    def do_post(handler: Any) -> None:
        try:
            original(handler)
        finally:
            fake = handler.server.fake
            if isinstance(fake, CountingServer):
                fake.done()

    monkeypatch.setattr(_server._Handler, "do_POST", do_post)
    with factory(delay=0.3, host=host) as fake:
        yield fake


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingServer]:
    with counting_server(monkeypatch) as fake:
        yield fake


def three_workers_fan_out(
    project: Path,
    counting: CountingServer,
    store_url: str,
    worker: Callable[..., Worker],
    command: Callable[[int], list[str]] | None = None,
) -> tuple[list[Worker], list[dict[str, Any]]]:
    """Three workers (the ``worker`` fixture; ``command(n)``, if given, runs the n-th) and one
    ``kernos run`` with ``run_executes = false`` spawn and run 12 background children at
    concurrency 2; checks the limit held, every child completed on a worker and the parent got
    each notice once. Returns the (stopped) workers and the ``tasks list --json`` rows."""
    path = project / "kernos.toml"
    config = path.read_text(encoding="utf-8").replace("concurrency = 5", "concurrency = 2")
    path.write_text(config + "run_executes = false\nheartbeat = 0.5\n", encoding="utf-8")
    items = [{"prompt": f"CHILD-{n}: count to {n}."} for n in range(CHILDREN)]
    batch = {"run_in_background": True, "subagent_type": "explore", "tasks": items}
    counting.script(
        tool_call("task", batch, when=agent_is("MAIN-AGENT", "fan out")),
        text("Waiting.", when=agent_is("MAIN-AGENT", "Batch running.")),
        text("done", when=agent_is("EXPLORE-AGENT"), repeat=True),
        text("Noted.", when=agent_is("MAIN-AGENT", "task completion"), repeat=True),
    )
    env = {**os.environ, **counting.env(), "KERNOS_HOME": str(project / ".kernos"),
           "KERNOS_STORE_URL": store_url}  # fmt: skip
    env.pop("KERNOS_TASK_ENGINE", None)  # auto: DBOS, since the store is PostgreSQL
    workers = [worker(project, env, command=command and command(n)) for n in range(3)]
    try:
        run = subprocess.run(
            [KERNOS, "run", "fan out", "-q"], cwd=project, env=env, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert run.stdout == "Noted.\n"
        listed = subprocess.run(
            [KERNOS, "tasks", "list", "--json", "-n", "100"], cwd=project, env=env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        tasks: list[dict[str, Any]] = json.loads(listed.stdout)["tasks"]
    finally:
        for started in workers:
            started.send_signal(signal.SIGTERM)
        for started in workers:
            started.stop()
    assert len(tasks) == CHILDREN
    assert {t["status"] for t in tasks} == {"completed"}
    pids = {f":{w.pid}" for w in workers}
    assert all(t["executor"][t["executor"].rindex(":") :] in pids for t in tasks)
    assert 1 <= counting.peak <= 2  # never more than the global limit, across 3 processes
    notices = "\n".join(t for t in user_texts(counting, "MAIN-AGENT") if "task completion" in t)
    noticed = re.findall(r"id:(t_[0-9a-f]{8}) ", notices)
    assert sorted(noticed) == sorted(t["id"] for t in tasks)  # each id once
    return workers, tasks


def test_three_workers_share_the_global_limit_and_the_parent_gets_each_notice_once(
    project: Path,
    counting: CountingServer,
    fresh_postgres_url: str,
    worker: Callable[..., Worker],
) -> None:
    three_workers_fan_out(project, counting, fresh_postgres_url, worker)
