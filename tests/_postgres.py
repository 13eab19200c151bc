"""A real, throw-away PostgreSQL 15 server for the tests.

The Debian server binaries live in ``/usr/lib/postgresql/15/bin``. PostgreSQL refuses to run as
root, and the tests do run as root, so the cluster belongs to the ``postgres`` user: its data
directory is a fresh temporary directory chowned to ``postgres`` and every server command runs
through ``runuser -u postgres --``. The server listens on 127.0.0.1 at a free port, keeps its unix
socket inside the temporary directory (never in /var/run), trusts every local connection and runs
with ``fsync=off``: the data is thrown away, so durability buys nothing here.

``PostgresServer(listen=["10.201.7.1/24"])`` also listens on that address and trusts clients from
its network (processes in another network namespace, see ``tests/_netns.py``); every other test
keeps the default, 127.0.0.1 only.

``KERNOS_TEST_PG_BIN`` points at other server binaries (default ``/usr/lib/postgresql/15/bin``).
``PostgresServer.stop()`` stops the server and removes the directory; it is safe to call twice
and is also registered with ``atexit`` so an interrupted test run leaves nothing running.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

PG_BIN = Path(os.environ.get("KERNOS_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_USER = "postgres"
_REQUIRED = ("initdb", "pg_ctl", "postgres")


def postgres_missing() -> str | None:
    """Why a test PostgreSQL cannot be started here, or None when it can."""
    for name in _REQUIRED:
        if not (PG_BIN / name).is_file():
            return (
                f"PostgreSQL 15 server binaries not found in {PG_BIN} "
                "(apt-get install postgresql-15)"
            )
    if shutil.which("runuser") is None:
        return "runuser not found: it starts PostgreSQL as the postgres user"
    try:
        import pwd

        pwd.getpwnam(PG_USER)
    except KeyError:
        return f"no {PG_USER!r} system user to run PostgreSQL as (apt-get install postgresql-15)"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres(*argv: str) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", PG_USER, "--", *argv]
    return list(argv)  # already an unprivileged user: run the binaries directly


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory; ``url`` is its superuser DSN.

    Args:
        listen: more addresses to listen on besides 127.0.0.1, each with its prefix length
            (``"10.201.7.1/24"``); connections from those networks are trusted too.
        settings: more server settings (``-c name=value``), e.g.
            ``{"idle_in_transaction_session_timeout": "10s"}``.
    """

    def __init__(
        self, listen: Sequence[str] = (), settings: Mapping[str, str] | None = None
    ) -> None:
        self.listen = [ipaddress.ip_interface(address) for address in listen]
        self.settings = dict(settings or {})
        self.root = Path(tempfile.mkdtemp(prefix="kernos-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log = self.root / "server.log"
        self.port = 0
        self._running = False
        atexit.register(self.stop)

    @property
    def url(self) -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/postgres"

    def start(self) -> PostgresServer:
        self.socket_dir.mkdir()
        if os.geteuid() == 0:
            for path in (self.root, self.socket_dir):
                shutil.chown(path, PG_USER, PG_USER)
        self._run(
            str(PG_BIN / "initdb"),
            "-D",
            str(self.data),
            "-U",
            PG_USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        if self.listen:
            with (self.data / "pg_hba.conf").open("a", encoding="utf-8") as hba:
                for interface in self.listen:
                    hba.write(f"host all all {interface.network} trust\n")
        # A free port can be taken between the probe and the bind by another engineer's run:
        # try a few before giving up.
        addresses = ",".join(["127.0.0.1", *(str(i.ip) for i in self.listen)])
        for attempt in range(5):
            self.port = _free_port()
            options = (
                f"-c listen_addresses={addresses} -p {self.port} -k {self.socket_dir} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=200"
            ) + "".join(f" -c {name}={value}" for name, value in self.settings.items())
            done = subprocess.run(
                _as_postgres(
                    str(PG_BIN / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-l",
                    str(self.log),
                    "-o",
                    options,
                    "-w",
                    "-t",
                    "60",
                    "start",
                ),
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode == 0:
                self._running = True
                return self
            if attempt == 4:
                log = self.log.read_text(errors="replace") if self.log.exists() else ""
                self.stop()
                raise RuntimeError(f"PostgreSQL did not start: {done.stderr.strip()}\n{log}")
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Stop the server (immediately: the data is thrown away) and remove its directory."""
        if self._running:
            self._running = False
            subprocess.run(
                _as_postgres(
                    str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"
                ),
                capture_output=True,
                check=False,
            )
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, *argv: str) -> None:
        done = subprocess.run(_as_postgres(*argv), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            self.stop()
            raise RuntimeError(f"{Path(argv[0]).name} failed: {done.stderr.strip()}")

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _with_database(url: str, database: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + database


def create_database(server_url: str, name: str | None = None) -> str:
    """Create an empty database on the server of ``server_url`` and return its URL."""
    import psycopg

    name = name or f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return _with_database(server_url, name)


def drop_database(server_url: str, url: str) -> None:
    """Drop the database of ``url`` (closing its leftover connections); never raises."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with contextlib.suppress(psycopg.Error), psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
