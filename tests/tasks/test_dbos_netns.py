"""Workers in network namespaces of their own: each ``kernos worker`` reaches
PostgreSQL and the model only over a veth link to the host, so what crosses the network between
the run, the workers, the store and the model is really tested. Needs root (CAP_NET_ADMIN) and
iproute2; skipped with the reason otherwise."""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is, last
from test_dbos import KERNOS, SPAWN, env, kill_9_mid_child_resumes_elsewhere, start, use_dbos
from test_dbos_postgres import counting_server, three_workers_fan_out
from tests._netns import Namespaces, NetnsUnavailable, pick_subnet, remove_stale
from tests._postgres import PostgresServer, create_database, postgres_missing
from tests._wait import wait_for
from tests.conftest import Worker

from kernos.testing import FakeOpenAIServer, text, tool_call

REPO = Path(__file__).resolve().parents[2]


def namespaces(count: int) -> Namespaces:
    try:
        return Namespaces(count).start()
    except NetnsUnavailable as exc:
        pytest.skip(f"no network namespaces here: {exc}")


@pytest.fixture
def links() -> Iterator[Namespaces]:
    """Three namespaces, each joined to the host by a veth pair; deleted after the test."""
    net = namespaces(3)
    try:
        yield net
    finally:
        net.stop()


@pytest.fixture
def linked_postgres(links: Namespaces) -> Iterator[str]:
    """A PostgreSQL of this test's own listening on the links' host address too: the URL of an
    empty database through that address."""
    missing = postgres_missing()
    if missing is not None:
        if os.environ.get("KERNOS_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"KERNOS_REQUIRE_POSTGRES=1 but {missing}", pytrace=False)
        pytest.skip(missing)
    # A worker whose link is cut inside a transaction leaves its backend idle in it, holding its
    # row locks (the reaper lease, a task row) until TCP gives up, hours later: another worker's
    # reaper would wait for them. The timeout ends such a transaction, as a deployment's should.
    settings = {"idle_in_transaction_session_timeout": "10s"}
    with PostgresServer(listen=[links.interface], settings=settings) as pg:
        yield create_database(pg.url).replace("@127.0.0.1:", f"@{links.host}:")


def pg_row(url: str, status: str) -> dict[str, Any] | None:
    import psycopg
    from psycopg.rows import dict_row

    try:
        with psycopg.connect(url, row_factory=dict_row) as conn:
            return conn.execute("SELECT * FROM tasks WHERE status = %s", (status,)).fetchone()
    except psycopg.errors.UndefinedTable:
        return None  # no kernos process has created the store yet


def reaches(net: Namespaces, n: int, host: str, port: int) -> bool:
    """Whether a process in namespace ``n`` can open a TCP connection to ``host:port``."""
    probe = (
        "import socket, sys\n"
        "try:\n"
        f"    socket.create_connection(({host!r}, {port}), timeout=5).close()\n"
        "except OSError:\n"
        "    sys.exit(1)\n"
    )
    done = subprocess.run(net.exec(n, [sys.executable, "-c", probe]), timeout=30, check=False)
    return done.returncode == 0


def worker_in(
    worker: Callable[..., Worker], net: Namespaces, n: int, project: Path, server: FakeOpenAIServer
) -> Worker:
    """``kernos worker`` (the ``worker`` fixture) in namespace ``n``, its store and model through
    the link."""
    return worker(project, env(project, server), command=net.exec(n, [KERNOS, "worker"]))


def children_clients(server: FakeOpenAIServer) -> list[str]:
    """The address each child (EXPLORE-AGENT) request came from, in arrival order."""
    pairs = zip(server.requests, server.clients, strict=True)
    return [client for request, client in pairs if agent_is("EXPLORE-AGENT")(request)]


# -- the helper itself -----------------------------------------------------------------------------
def test_a_subnet_is_picked_from_the_pid_and_skips_those_in_use() -> None:
    used = [ipaddress.IPv4Network("10.200.5.0/24"), ipaddress.IPv4Network("10.200.0.0/22")]
    assert str(pick_subnet(5, [])) == "10.200.5.0/24"
    assert str(pick_subnet(5, used)) == "10.200.6.0/24"
    assert str(pick_subnet(1, used)) == "10.200.4.0/24"  # 10.200.1-3 are inside the /22
    assert str(pick_subnet(51 * 256 + 7, [])) == "10.200.7.0/24"
    assert str(pick_subnet(51 * 256 - 1, [])) == "10.250.255.0/24"


def test_namespaces_a_dead_pytest_left_behind_are_removed_and_ours_too() -> None:
    if shutil.which("ip") is None:
        pytest.skip("no network namespaces here: no `ip` command (iproute2)")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = f"kn{dead.pid}"
    try:
        created = subprocess.run(["ip", "netns", "add", f"{stale}n0"], capture_output=True)
        if created.returncode != 0:
            pytest.skip(f"no network namespaces here: {created.stderr.decode().strip()}")
        subprocess.run(
            ["ip", "link", "add", f"{stale}h0", "type", "veth", "peer", "name", f"{stale}p0"],
            check=True,
        )
        net = namespaces(1)
        try:
            assert not {f"{stale}n0", f"{stale}h0", f"{stale}p0"} & set(_names())
            ours = net.namespaces[0]
            assert {ours.name, ours.host_end, net.bridge} <= set(_names())
            assert ipaddress.ip_address(ours.address) in net.network
            with (
                socket.create_server((net.host, 0)) as linked,
                socket.create_server(("127.0.0.1", 0)) as loopback,
            ):
                assert reaches(net, 0, net.host, linked.getsockname()[1])
                assert not reaches(net, 0, "127.0.0.1", loopback.getsockname()[1])
        finally:
            net.stop()
        assert not {ours.name, ours.host_end, net.bridge} & set(_names())
    finally:
        remove_stale()


def test_without_the_privilege_or_the_command_the_helper_says_why_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What makes the namespace tests skip: an unprivileged user (no CAP_NET_ADMIN), no `ip`."""
    python = Path("/usr/bin/python3")  # the venv's may not be readable by an unprivileged user
    if os.geteuid() != 0 or shutil.which("runuser") is None or not python.is_file():
        pytest.skip("needs root, runuser and /usr/bin/python3 to try as an unprivileged user")
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2): the unprivileged try would not reach `ip`")
    # the helper, copied where that user can read it (the checkout may be in a private directory)
    shelf = Path(tempfile.mkdtemp(prefix="kernos-netns-"))
    try:
        shelf.chmod(0o755)
        shutil.copyfile(REPO / "tests" / "_netns.py", shelf / "_netns.py")
        (shelf / "_netns.py").chmod(0o644)
        program = (
            f"import sys; sys.path.insert(0, {str(shelf)!r})\n"
            "from _netns import Namespaces, NetnsUnavailable\n"
            "try:\n"
            "    Namespaces(1).start()\n"
            "except NetnsUnavailable as exc:\n"
            "    print(exc)\n"
        )
        done = subprocess.run(
            ["runuser", "-u", "nobody", "--", str(python), "-c", program], cwd="/",
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        shutil.rmtree(shelf, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("`ip netns add kn") and "failed: " in done.stdout
    assert done.stdout.count("\n") == 1 and done.stderr == ""
    monkeypatch.setenv("PATH", "")
    with pytest.raises(NetnsUnavailable, match=r"^no `ip` command \(iproute2\)"):
        Namespaces(1).start()


def _names() -> list[str]:
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [line.split()[1].rstrip(":").split("@")[0] for line in links.splitlines()]
    return names + [line.split()[0] for line in spaces.splitlines() if line]


# -- workers in namespaces -------------------------------------------------------------------------
@pytest.mark.postgres
@pytest.mark.slow
def test_three_namespaced_workers_share_the_global_limit_over_the_link(
    project: Path,
    links: Namespaces,
    linked_postgres: str,
    monkeypatch: pytest.MonkeyPatch,
    worker: Callable[..., Worker],
) -> None:
    port = int(linked_postgres.rsplit(":", 1)[1].split("/")[0])
    assert reaches(links, 0, links.host, port)  # the store, over the link
    assert not reaches(links, 0, "127.0.0.1", port)  # and only over it
    with counting_server(monkeypatch, host=links.host) as counting:
        workers, tasks = three_workers_fan_out(
            project, counting, linked_postgres, worker, lambda n: links.exec(n, [KERNOS, "worker"])
        )
        # (executors named a namespaced worker's pid: checked by three_workers_fan_out)
        clients = children_clients(counting)
        parents = {c for r, c in zip(counting.requests, counting.clients, strict=True)
                   if agent_is("MAIN-AGENT")(r)}  # fmt: skip
    assert len(clients) == 12
    assert set(clients) <= {ns.address for ns in links.namespaces}  # from inside, over a link
    assert parents == {links.host}  # the run, on the host
    # the namespaces the children's requests came from are those of the workers named executors
    where = {f":{w.pid}": links.namespaces[n].address for n, w in enumerate(workers)}
    assert set(clients) == {where[t["executor"][t["executor"].rindex(":") :]] for t in tasks}


@pytest.mark.postgres
@pytest.mark.slow
def test_kill_9_of_a_namespaced_worker_mid_child_resumes_on_another_over_the_link(
    project: Path,
    links: Namespaces,
    linked_postgres: str,
    procs: list[subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
    worker: Callable[..., Worker],
) -> None:
    monkeypatch.setenv("KERNOS_STORE_URL", linked_postgres)
    with FakeOpenAIServer(host=links.host) as server:
        started: list[int] = []

        def start_worker() -> Worker:
            started.append(len(started))
            return worker_in(worker, links, started[-1], project, server)

        first, _ = kill_9_mid_child_resumes_elsewhere(
            project, server, procs, start_worker, lambda status: pg_row(linked_postgres, status)
        )
        clients = children_clients(server)
        roles = [last(r).get("role") for r in server.requests if agent_is("EXPLORE-AGENT")(r)]
    assert first.proc.returncode == -signal.SIGKILL
    a, b = (ns.address for ns in links.namespaces[:2])
    # step 1 and the in-flight step 2 on the killed worker's namespace, step 2 again on the other's
    assert list(zip(roles, clients, strict=True)) == [("user", a), ("tool", a), ("tool", b)]


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("on_crash", ["resume", "lost"])
def test_a_worker_cut_off_mid_child_falls_silent_and_its_child_resumes_elsewhere_or_is_lost(
    project: Path,
    links: Namespaces,
    linked_postgres: str,
    procs: list[subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
    on_crash: str,
    worker: Callable[..., Worker],
) -> None:
    """The worker is alive but its link is down: its heartbeat lapses and the other worker
    settles the child per ``on_crash``: resumed there and ``completed``, or ``lost``; never
    stuck running."""
    use_dbos(project, run_executes="false", on_crash=f'"{on_crash}"', heartbeat="0.5")
    monkeypatch.setenv("KERNOS_STORE_URL", linked_postgres)
    gate = threading.Event()
    with FakeOpenAIServer(host=links.host) as server:
        server.script(
            tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
            text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
            text("The survey found 3 modules.", when=agent_is("EXPLORE-AGENT"), hold=gate,
                 repeat=True),
            text("Survey: 3 modules.", when=agent_is("MAIN-AGENT", "status:completed")),
            text("The survey was lost.", when=agent_is("MAIN-AGENT", "status:lost")),
        )  # fmt: skip
        workers = [worker_in(worker, links, n, project, server) for n in range(2)]
        run = start(project, server, "run", "survey it", "-q")
        procs.append(run)
        wait_for(lambda: children_clients(server), "the child's request")
        running = wait_for(lambda: executor_of(pg_row(linked_postgres, "running")), "executor")
        pid = int(running.rsplit(":", 1)[1])
        (cut,) = [n for n, w in enumerate(workers) if w.pid == pid]
        links.cut(cut)
        if on_crash == "resume":
            wait_for(lambda: len(children_clients(server)) == 2, "the child to resume elsewhere")
        else:
            wait_for(lambda: pg_row(linked_postgres, "lost"), "the child to be lost")
        gate.set()
        out, errors = run.communicate(timeout=120)
        clients = children_clients(server)
    workers[cut].kill()  # cut off, it would never finish its own store writes
    assert run.returncode == 0, errors
    assert pg_row(linked_postgres, "running") is None
    other = 1 - cut
    if on_crash == "resume":
        assert out == "Survey: 3 modules.\n"  # one notice, from the resumed child
        task = pg_row(linked_postgres, "completed")
        assert task is not None
        assert task["executor"] == f"{socket.gethostname()}:{workers[other].pid}"
        assert clients == [links.namespaces[cut].address, links.namespaces[other].address]
    else:
        assert out == "The survey was lost.\n"
        task = pg_row(linked_postgres, "lost")
        assert task is not None and "stopped answering" in task["error"]
        assert clients == [links.namespaces[cut].address]  # not run again anywhere


def executor_of(row: dict[str, Any] | None) -> str:
    return str(row["executor"] or "") if row is not None else ""
