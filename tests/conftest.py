"""Shared fixtures: a scripted local OpenAI-compatible server, an isolated kernos home, one
throw-away PostgreSQL for the session (``postgres_url``, ``fresh_postgres_url``), the processes
a test starts (``procs``: ``kernos worker``, ``kernos run``), stopped before its database goes,
and ``worker``: how a test starts a ``kernos worker``, reads what it says and stops it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from kernos.runtime import forget_secrets
from kernos.testing import FakeOpenAIServer

from ._postgres import PostgresServer, create_database, drop_database, postgres_missing
from ._wait import TIMEOUT, wait_for

#: the processes a test started (the ``procs`` fixture's list), on the test's node
_STARTED = pytest.StashKey[list["subprocess.Popen[str]"]]()
#: the thread that reads each :class:`Worker`'s stderr, by its process
_READ: weakref.WeakKeyDictionary[subprocess.Popen[str], threading.Thread] = (
    weakref.WeakKeyDictionary()
)

KERNOS = str(Path(os.sys.executable).with_name("kernos"))  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the developer's state or model settings."""
    monkeypatch.setenv("KERNOS_HOME", str(tmp_path / ".kernos"))
    for name in (
        "KERNOS_MODEL",
        "KERNOS_STORE_URL",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)  # a developer's collector gets no test spans
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "no-tiktoken-cache"))


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    """The scrubber's registry is process-wide: one test's secrets never shred another's text."""
    forget_secrets()
    yield
    forget_secrets()


@pytest.fixture(autouse=True)
def _no_remote_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Block connections to anything but loopback: tests never reach a real provider."""
    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: object) -> object:
        host = address[0] if isinstance(address, tuple) else None
        if isinstance(host, str) and host not in ("127.0.0.1", "::1", "localhost"):
            raise OSError(f"test tried to reach {host}: tests run offline against loopback")
        return real_connect(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", guarded)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def openai_env(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAIServer:
    """Point ``openai-chat:`` at the local server for in-process tests."""
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    return server


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "postgres: runs against a real PostgreSQL (deselect with -m 'not postgres')"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the server is a `postgres` test, without having to say so twice."""
    for item in items:
        if {"postgres_url", "fresh_postgres_url"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL 15 for the whole test session: the superuser URL of its `postgres` db.

    Skips (with the reason) when the server binaries are absent, unless KERNOS_REQUIRE_POSTGRES=1
    (set by `make pytest`, so CI fails instead of silently skipping). The server is stopped and
    its directory removed at the end of the session, whatever the tests did.
    """
    missing = postgres_missing()
    if missing is not None:
        if os.environ.get("KERNOS_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"KERNOS_REQUIRE_POSTGRES=1 but {missing}", pytrace=False)
        pytest.skip(missing)
    with PostgresServer() as pg:
        yield pg.url


@pytest.fixture
def fresh_postgres_url(postgres_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """An empty database of its own for one test, dropped afterwards: after the test's
    processes (``procs``) have stopped: a worker whose database was dropped under it cannot
    finish its clean-up, and is cut off only 30 s later."""
    url = create_database(postgres_url)
    yield url
    stop_processes(request.node.stash.get(_STARTED, []))
    drop_database(postgres_url, url)


@pytest.fixture
def procs(request: pytest.FixtureRequest) -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test started (``kernos run``, ``kernos worker``): stopped after it (before
    its ``fresh_postgres_url`` is dropped, whichever fixture came first)."""
    started: list[subprocess.Popen[str]] = request.node.stash.setdefault(_STARTED, [])
    yield started
    stop_processes(started)


def stop_processes(started: list[subprocess.Popen[str]], timeout: float = 30.0) -> None:
    """SIGTERM to every process still running, all at once; then each is waited for, and
    killed if it has not ended within ``timeout`` seconds. One that has ended is left alone."""
    running = [proc for proc in started if proc.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    for proc in running:
        reader = _READ.get(proc)  # a Worker's thread reads its pipe: no one else may
        end = proc.communicate if reader is None else proc.wait
        try:
            end(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            end()
        if reader is not None:
            reader.join(timeout=timeout)


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """What to open a :class:`kernos.runtime.Store` on, once per database kernos supports: a
    SQLite file path, or the URL of an empty PostgreSQL database of this test's own."""
    if request.param == "sqlite":
        return str(tmp_path / "kernos.db")
    return str(request.getfixturevalue("fresh_postgres_url"))


class Worker:
    """A ``kernos worker`` a test started (see the ``worker`` fixture): its stderr is read line
    by line on a thread, so its pipe never fills and a test waits for a line it prints."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []  # what it printed on stderr so far
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        _READ[proc] = self._reader

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stderr is not None
        # the pipe is closed under it when ``procs`` reaps a worker the test left running
        with contextlib.suppress(ValueError, OSError):
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
            self.proc.stderr.close()  # its end: every line is read

    def wait_line(self, word: str, timeout: float = TIMEOUT) -> str:
        """The first line it printed that contains ``word``, once it has (its start line says
        ``executing``: DBOS launched, its queues polled, beating); fails at once if it ends."""

        def printed() -> str | None:
            ended = self.proc.poll() is not None
            if ended:
                self._reader.join(timeout=10)  # what it printed before it ended: all read
            line = next((line for line in self.lines if word in line), None)
            assert line is not None or not ended, f"it exited {self.proc.returncode}"
            return line

        try:
            return wait_for(printed, f"the worker to print {word!r}", timeout)
        except AssertionError as failed:
            said = "\n".join(self.lines[-20:])
            raise AssertionError(f"{failed}; it printed:\n{said}") from None

    def send_signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def poll(self) -> int | None:
        return self.proc.poll()

    def explain(self) -> str:
        """How it ended (for a wait that watched it): its exit code and what it printed last."""
        self._reader.join(timeout=10)
        said = "\n".join(self.lines[-20:])
        return f"kernos worker (pid {self.pid}) exited {self.proc.returncode}, saying:\n{said}\n"

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 60.0) -> list[str]:
        """Send ``signum`` (unless it has ended), wait for it to end: every line it printed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the worker did not end within {timeout} s of {signum}") from None
        self._reader.join(timeout=timeout)  # the pipe's end: every line is read
        return list(self.lines)

    def kill(self) -> None:
        """SIGKILL: a crash; returns once it has ended."""
        self.stop(signal.SIGKILL)


@pytest.fixture
def worker(procs: list[subprocess.Popen[str]]) -> Callable[..., Worker]:
    """Start a ``kernos worker``: ``worker(cwd, env, *args)`` (``command=`` another way to run
    it, e.g. in a network namespace). It is on ``procs``: stopped after the test, if the test
    did not :meth:`Worker.stop` it."""

    def start(
        cwd: Path, env: Mapping[str, str], *args: str, command: Sequence[str] | None = None
    ) -> Worker:
        proc = subprocess.Popen(
            [*command] if command is not None else [KERNOS, "worker", *args],
            cwd=cwd, env=dict(env), stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(proc)
        return Worker(proc)

    return start
