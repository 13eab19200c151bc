"""Cancel from anywhere and worker shutdown on the DBOS engine.

Real processes only: a ``kernos run`` spawns a background child, a ``kernos worker`` executes it,
and the model is a local server. For the cancel tests the server holds the child's request open
(it never answers) and records when the client closed the connection, so "the in-flight request
was aborted" is something the server saw, not something kernos says.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is, user_texts
from tests import _wait as wait
from tests.conftest import Worker

from kernos.testing import FakeOpenAIServer, _server, text, tool_call

KERNOS = str(Path(sys.executable).with_name("kernos"))
SPAWN = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
         "run_in_background": True}  # fmt: skip
#: generous: the machine is shared; the latency itself is printed, never asserted
DEADLINE = 60.0
pytestmark = pytest.mark.slow


# -- a model server that holds the child's request and sees the client hang up -----------------
class HoldingServer(FakeOpenAIServer):
    """Answers from its script, except the first ``count`` child requests: each is held open,
    never answered, and the server records when the client closed its connection
    (``aborted``)."""

    def __init__(self, holds: Callable[[dict[str, Any]], bool], count: int = 1_000) -> None:
        super().__init__()
        self.holds = holds
        self.count = count
        self.local = threading.local()
        self.held = threading.Event()  # a child request is in flight now
        self.aborted: list[float] = []  # when the client closed a held connection
        self.released = threading.Event()  # stop holding (the test is over)

    def _answer(self, request: dict[str, Any], authorization: str) -> Any:
        handler = getattr(self.local, "handler", None)
        if handler is None or not self.holds(request):
            return super()._answer(request, authorization)
        with self._lock:
            held = self.count > 0
            if held:
                self.count -= 1
                self._requests.append(request)
        if not held:
            return super()._answer(request, authorization)
        self.held.set()
        connection: socket.socket = handler.connection
        # a peer playing a server that never answers, not a wait of the test's: it holds the
        # request until the client hangs up or the test is over (bounded all the same)
        give_up = time.monotonic() + 2 * DEADLINE
        while not self.released.is_set() and time.monotonic() < give_up:
            readable, _, _ = select.select([connection], [], [], 0.05)
            if readable:
                try:
                    closed = connection.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    closed = True
                if closed:
                    self.aborted.append(time.monotonic())
                    break
        return "HoldingServer: the held request was never answered"


@pytest.fixture
def holding(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HoldingServer]:
    """The holding server; ``indirect`` parametrization sets how many child requests it holds
    (default: all of them)."""
    original = _server._Handler.do_POST

    def do_post(handler: Any) -> None:
        fake = handler.server.fake
        if isinstance(fake, HoldingServer):
            fake.local.handler = handler
        original(handler)

    monkeypatch.setattr(_server._Handler, "do_POST", do_post)
    fake = HoldingServer(agent_is("EXPLORE-AGENT"), count=getattr(request, "param", 1_000))
    with fake:
        yield fake
        fake.released.set()


# -- one store: SQLite (DBOS engine) or a fresh PostgreSQL database ----------------------------
class Store:
    def __init__(self, project: Path, url: str | None) -> None:
        self.project, self.url = project, url

    def env(self, server: FakeOpenAIServer) -> dict[str, str]:
        environ = {**os.environ, **server.env(), "KERNOS_HOME": str(self.project / ".kernos")}
        environ.pop("KERNOS_TASK_ENGINE", None)
        environ.pop("KERNOS_STORE_URL", None)
        if self.url is not None:
            environ["KERNOS_STORE_URL"] = self.url  # engine auto: DBOS on PostgreSQL
        return environ

    def rows(self) -> list[dict[str, Any]]:
        sql = "SELECT id, status, executor, error FROM tasks ORDER BY created_at"
        if self.url is None:
            try:
                with sqlite3.connect(self.project / ".kernos" / "kernos.db") as db:
                    db.row_factory = sqlite3.Row
                    return [dict(r) for r in db.execute(sql).fetchall()]
            except sqlite3.OperationalError:
                return []
        import psycopg
        from psycopg.rows import dict_row

        try:
            with psycopg.connect(self.url, row_factory=dict_row) as conn:
                return list(conn.execute(sql).fetchall())
        except psycopg.errors.UndefinedTable:
            return []

    def workflow(self, workflow_id: str) -> str | None:
        """The DBOS status of one workflow (``None``: no such workflow)."""
        if self.url is None:
            with sqlite3.connect(self.project / ".kernos" / "dbos.sqlite") as db:
                found = db.execute(
                    "SELECT status FROM workflow_status WHERE workflow_uuid = ?", (workflow_id,)
                ).fetchall()
        else:
            import psycopg

            with psycopg.connect(self.url) as conn:
                found = conn.execute(
                    "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s",
                    (workflow_id,),
                ).fetchall()
        return str(found[0][0]) if found else None

    def wait(self, status: str, timeout: float = DEADLINE) -> dict[str, Any]:
        found = lambda: [r for r in self.rows() if r["status"] == status]  # noqa: E731
        return wait.wait_for(found, f"a task {status}", timeout)[0]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, project: Path) -> Store:
    if request.param == "sqlite":
        with (project / "kernos.toml").open("a", encoding="utf-8") as config:
            config.write('engine = "dbos"\n')
        return Store(project, None)
    return Store(project, str(request.getfixturevalue("fresh_postgres_url")))


def tasks_config(project: Path, **tasks: Any) -> None:
    """More keys in the project's ``[tasks]`` section (the last of the test config)."""
    with (project / "kernos.toml").open("a", encoding="utf-8") as config:
        config.write("".join(f"{k} = {v}\n" for k, v in tasks.items()))


def start(
    store: Store, server: FakeOpenAIServer, procs: list[subprocess.Popen[str]], *args: str
) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [KERNOS, *args], cwd=store.project, env=store.env(server),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    procs.append(proc)
    return proc


#: the workers a test started (:func:`start_worker`), by pid (see :func:`explained`)
_WORKERS: dict[int, Worker] = {}


def start_worker(
    worker: Callable[..., Worker], store: Store, server: FakeOpenAIServer, *args: str
) -> Worker:
    """A ``kernos worker`` on ``store`` (the ``worker`` fixture)."""
    started = worker(store.project, store.env(server), *args)
    _WORKERS[started.pid] = started
    return started


#: the stderr of each process a test already read to its end, by pid (see :func:`explained`)
_STDERR: dict[int, str] = {}


def finish(proc: subprocess.Popen[str], timeout: float = DEADLINE) -> tuple[str, str]:
    """``proc.communicate``, keeping its stderr for :func:`explained`."""
    out, errors = proc.communicate(timeout=timeout)
    _STDERR[proc.pid] = errors
    return out, errors


@pytest.fixture
def explained(
    request: pytest.FixtureRequest,
    store: Store,
    holding: HoldingServer,
    procs: list[subprocess.Popen[str]],
) -> Iterator[None]:
    """When the test failed, print what each process said (stderr; one still running is
    stopped first), the store's rows, what the parent model was told (a completion notice
    names the child's end and why) and the shared ``kernos.log``: a flake shows its cause."""
    yield
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    print("\n==== what the processes said ====")
    for proc in procs:
        if (started := _WORKERS.get(proc.pid)) is not None:
            with contextlib.suppress(AssertionError):
                started.stop(signal.SIGTERM, timeout=30)
            said = "\n".join(started.lines)
        else:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
                    finish(proc, timeout=30)
            said = _STDERR.get(proc.pid, "(not read)")
        print(f"---- {' '.join(proc.args[1:])} (pid {proc.pid}, exit {proc.returncode})")
        print(said)
    print(f"---- rows: {store.rows()}")
    print(f"---- the parent model was told: {user_texts(holding, 'MAIN-AGENT')}")
    log = store.project / ".kernos" / "kernos.log"
    if log.exists():
        print(f"---- {log} (last 200 lines)")
        print("\n".join(log.read_text(encoding="utf-8").splitlines()[-200:]))


def wait_set(event: threading.Event, what: str, procs: Sequence[wait.Alive]) -> None:
    """Until ``event`` is set, while ``procs`` run."""
    wait.wait_for(event.is_set, what, DEADLINE, alive=procs)


def transcript(store: Store, server: FakeOpenAIServer, task_id: str) -> list[str]:
    shown = subprocess.run(
        [KERNOS, "tasks", "output", task_id], cwd=store.project, env=store.env(server),
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.splitlines()


def cancelled_events(store: Store, server: FakeOpenAIServer, task_id: str) -> list[str]:
    return [line for line in transcript(store, server, task_id) if "→ cancelled" in line]


def stop(worker: Worker, signum: int) -> tuple[int, str]:
    """Signal a worker once it is ready (its start line: its signal handlers are in place);
    its exit code and every line it printed."""
    worker.wait_line(" executing ", DEADLINE)
    said = worker.stop(signum, DEADLINE)
    return worker.proc.returncode, "\n".join(said)


# -- cancel from a third process ---------------------------------------------------------------
def test_cancel_from_a_third_process_stops_the_worker_s_child_and_aborts_its_request(
    project: Path,
    store: Store,
    holding: HoldingServer,
    procs: list[subprocess.Popen[str]],
    explained: None,
    worker: Callable[..., Worker],
) -> None:
    tasks_config(project, run_executes="false", heartbeat="0.5")
    holding.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("Noted.", when=agent_is("MAIN-AGENT", "task completion"), repeat=True),
    )
    executing = start_worker(worker, store, holding)
    run = start(store, holding, procs, "run", "survey it", "-q")
    wait_set(holding.held, "the worker's child reached the model", [executing, run])
    child = store.wait("running")
    assert child["executor"] == f"{socket.gethostname()}:{executing.pid}"

    asked = time.monotonic()
    cancel = subprocess.run(
        [KERNOS, "tasks", "cancel", child["id"]], cwd=project, env=store.env(holding),
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    answered = time.monotonic() - asked
    assert cancel.returncode == 0, cancel.stderr
    assert f"executor {child['executor']}" in cancel.stdout
    store.wait("cancelled")
    latency = time.monotonic() - asked
    wait.wait_for(lambda: holding.aborted, "the worker to close the held model request", DEADLINE)
    kind = "postgres" if store.url else "sqlite"
    aborted = holding.aborted[0] - asked
    print(f"\ncancel latency on {kind}: the command {answered:.2f}s, `cancelled` {latency:.2f}s, "
          f"the model request aborted {aborted:.2f}s after the command started")  # fmt: skip

    out, errors = finish(run)
    assert run.returncode == 0, errors
    assert out == "Started; waiting.\n"
    # a cancelled child does not report back
    assert not [t for t in user_texts(holding, "MAIN-AGENT") if "task completion" in t]
    (final,) = store.rows()
    assert final["status"] == "cancelled", final
    # one process wrote the end: the worker that ran it, not also the run that follows it
    assert len(cancelled_events(store, holding, child["id"])) == 1
    code, errors = stop(executing, signal.SIGTERM)  # it went on serving until now
    assert code == 0, errors
    assert "0 running children" in errors
    assert "Traceback" not in errors


def test_cancel_of_a_queued_child_whose_run_has_exited_is_final(
    project: Path,
    store: Store,
    holding: HoldingServer,
    procs: list[subprocess.Popen[str]],
    worker: Callable[..., Worker],
) -> None:
    """The run left its queued child to the workers (``--no-wait``), none was running: a cancel
    from another process ends it at once, and a worker started later never runs it."""
    tasks_config(project, run_executes="false", heartbeat="0.5", on_crash='"resume"')
    holding.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; not waiting.", when=agent_is("MAIN-AGENT", "Started task")),
    )
    run = start(store, holding, procs, "run", "survey it", "-q", "--no-wait")
    _, errors = run.communicate(timeout=DEADLINE)
    assert run.returncode == 0, errors
    (queued,) = store.rows()
    assert queued["status"] in ("pending", "running") and queued["executor"] is None
    cancel = subprocess.run(
        [KERNOS, "tasks", "cancel", queued["id"]], cwd=project, env=store.env(holding),
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert cancel.returncode == 0, cancel.stderr
    assert "no executor had taken it" in cancel.stdout
    assert store.rows()[0]["status"] == "cancelled"
    executing = start_worker(worker, store, holding)
    dequeued = lambda: store.workflow(queued["id"]) not in ("ENQUEUED", None)  # noqa: E731
    wait.wait_for(dequeued, "the worker to dequeue it", DEADLINE)
    code, errors = stop(executing, signal.SIGTERM)
    assert code == 0, errors
    assert not holding.held.is_set()  # the child never reached the model
    (final,) = store.rows()
    assert final["status"] == "cancelled" and final["executor"] is None


def test_a_left_child_whose_workflow_was_cancelled_elsewhere_ends_lost_by_a_worker_s_reaper(
    project: Path,
    store: Store,
    holding: HoldingServer,
    procs: list[subprocess.Popen[str]],
    worker: Callable[..., Worker],
) -> None:
    """No process follows a ``--no-wait`` run's queued child once the run exited: when its
    workflow is cancelled through DBOS (not ``kernos tasks cancel``: the row says nothing), a
    worker's reaper ends it ``lost``, saying why, once; it is not left active forever."""
    from dbos import DBOSClient

    tasks_config(project, run_executes="false", heartbeat="0.5")
    holding.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; not waiting.", when=agent_is("MAIN-AGENT", "Started task")),
    )
    # it serves another model's queue only: the child stays queued, but the worker reaps
    executing = start_worker(worker, store, holding, "--models", "openai-chat:other")
    executing.wait_line(" executing ", DEADLINE)  # ready: beating, and holding the reaper lease
    run = start(store, holding, procs, "run", "survey it", "-q", "--no-wait")
    _, errors = run.communicate(timeout=DEADLINE)
    assert run.returncode == 0, errors
    (queued,) = store.rows()
    assert queued["status"] in ("pending", "running") and queued["executor"] is None
    assert store.workflow(queued["id"]) == "ENQUEUED"
    url = store.url or f"sqlite:///{project / '.kernos' / 'dbos.sqlite'}"
    client = DBOSClient(system_database_url=url)
    try:
        client.cancel_workflow(queued["id"])
    finally:
        client.destroy()
    lost = store.wait("lost")
    assert lost["id"] == queued["id"]
    assert f"its DBOS workflow {queued['id']} ended (CANCELLED)" in lost["error"]
    assert "start it again with the task tool" in lost["error"]
    lines = [line for line in transcript(store, holding, queued["id"]) if "→ lost" in line]
    assert len(lines) == 1, lines
    assert not holding.held.is_set()  # never run
    errors = "\n".join(executing.stop(signal.SIGTERM, DEADLINE))  # ready already (see above)
    assert executing.proc.returncode == 0, errors
    assert "Traceback" not in errors


# -- a worker stopped by a signal ----------------------------------------------------------------
@pytest.mark.parametrize("holding", [1], indirect=True)
def test_sigterm_leaves_the_running_child_to_another_worker_that_finishes_it(
    project: Path, fresh_postgres_url: str, holding: HoldingServer,
    procs: list[subprocess.Popen[str]], worker: Callable[..., Worker],
) -> None:  # fmt: skip
    store = Store(project, fresh_postgres_url)  # on_crash: "resume", the Postgres default
    tasks_config(project, run_executes="false", heartbeat="0.5")
    holding.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("The survey found 3 modules.", when=agent_is("EXPLORE-AGENT")),
        text("Survey: 3 modules.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    workers = [start_worker(worker, store, holding) for _ in range(2)]
    run = start(store, holding, procs, "run", "survey it", "-q")
    wait_set(holding.held, "a worker's child reached the model", [*workers, run])
    child = store.wait("running")
    (first,) = [w for w in workers if child["executor"].endswith(f":{w.pid}")]
    (other,) = [w for w in workers if w is not first]

    code, errors = stop(first, signal.SIGTERM)
    assert code == 0, errors
    assert errors.splitlines()[-1] == (
        f"worker {child['executor']} stopped; 1 running child left to other workers to resume"
    )
    out, errors = run.communicate(timeout=DEADLINE)
    assert run.returncode == 0, errors
    assert out == "Survey: 3 modules.\n"
    (final,) = store.rows()
    assert final["status"] == "completed", final
    assert final["executor"] == f"{socket.gethostname()}:{other.pid}"
    notices = [t for t in user_texts(holding, "MAIN-AGENT") if "task completion" in t]
    assert len(notices) == 1 and notices[0].count(f"id:{child['id']} ") == 1
    assert holding.aborted  # the stopped worker dropped its request; the other sent it again
    # left, not ended: no other status on the way (never lost, never ended twice)
    assert [line.split(" (run epoch")[0] for line in transcript(store, holding, child["id"])
            if line.startswith("[status]")] == [
        "[status] created → pending", "[status] pending → running", "[status] running → completed"
    ]  # fmt: skip
    code, errors = stop(other, signal.SIGINT)
    assert code == 130, errors
    assert errors.splitlines()[-1].endswith("stopped; 0 running children left to other workers "
                                            "to resume")  # fmt: skip


def test_sigterm_with_on_crash_lost_ends_the_child_lost(
    project: Path,
    holding: HoldingServer,
    procs: list[subprocess.Popen[str]],
    worker: Callable[..., Worker],
) -> None:
    store = Store(project, None)
    tasks_config(project, engine='"dbos"', run_executes="false", on_crash='"lost"')
    holding.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("It was lost.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    executing = start_worker(worker, store, holding)
    run = start(store, holding, procs, "run", "survey it", "-q")
    wait_set(holding.held, "the worker's child reached the model", [executing, run])
    child = store.wait("running")
    code, errors = stop(executing, signal.SIGTERM)
    assert code == 0, errors
    assert errors.splitlines()[-1] == f"worker {child['executor']} stopped; 1 running child lost"
    out, errors = run.communicate(timeout=DEADLINE)
    assert run.returncode == 0, errors
    assert out == "It was lost.\n"
    (final,) = store.rows()
    assert final["status"] == "lost" and "stopped before it finished" in final["error"]


def test_worker_help_states_what_a_signal_does_to_its_children() -> None:
    shown = subprocess.run(
        [KERNOS, "worker", "--help"], capture_output=True, text=True, timeout=DEADLINE,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    said = " ".join(shown.stdout.split())
    assert "SIGTERM (exit 0) or SIGINT (exit 130) stops taking new children" in said
    assert 'With [tasks] on_crash = "resume" (the PostgreSQL default)' in said
    assert "to resume from their last step" in said
    assert 'with "lost" they end lost' in said
