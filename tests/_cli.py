"""``kernos(...)``: the real ``kernos`` CLI in a real, separate process, without its imports' cost.

A ``kernos`` process spends ~1 s of CPU importing (pydantic-ai, the MCP SDK, rich) before its
command starts, and the suite runs hundreds of them. Here each pytest process starts one
pre-warmed "zygote" (``tests/_cli_zygote.py``, a clean ``python -c`` that imports what a
``kernos run`` imports), lazily on the first call and ended at exit. Each call has it fork a
process that becomes what ``subprocess.run([KERNOS, ...])`` would have started: its own session
(``os.setsid``), the given cwd, the given environment (the whole of it, or this process's), argv,
stdin (this process's, or a pipe fed ``input``), stdout and stderr pipes read here, the signal
dispositions of a fresh python process; it runs :func:`kernos.cli.main` and exits as the
interpreter would. The result is a :class:`subprocess.CompletedProcess` as ``subprocess.run(...,
capture_output=True, text=True)`` returns it; on timeout the process's group is killed and
:class:`subprocess.TimeoutExpired` raised.

What a fork would inherit that a fresh process would not, and how it is kept out:

- module state read at import from the environment: the zygote notes every variable its imports
  read (and the interpreter's own start-up variables, ``PYTHON*``, ``LC_*``, ``LANG``); a call
  whose environment differs from the zygote's in any of them runs as a plain subprocess.
  ``HOME`` is read at import by ``sysconfig`` only (the user base, unused: a venv has no user
  site), so it may differ;
- the cwd at import: the zygote imports in ``/``, and its ``sys.path[0]`` is the script's
  directory, as a fresh ``kernos``'s is (never the cwd);
- threads: the zygote refuses to start if its imports started one (a fork copies only one);
- random state: ``random`` and ``tempfile`` reseed after a fork, ``os.urandom`` has no state;
- signal dispositions: reset to those the zygote started with (a fresh python's);
- open fds: the zygote refuses to start if its imports left one open; the command's process
  closes the zygote's socket and gets only 0, 1 and 2.
- hash randomisation: every fork shares the zygote's hash seed (a fresh process draws its own),
  so set and dict-of-str orders are the same across the calls of one pytest process.

``KERNOS_TEST_FORK=0`` runs every call as a plain ``subprocess.run``, to compare.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import locale
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

KERNOS = str(Path(sys.executable).with_name("kernos"))
ZYGOTE = Path(__file__).with_name("_cli_zygote.py")

#: read by the interpreter as it starts (sys.path, stdio encoding, hash seed, locale)
START_UP_PREFIXES = ("PYTHON", "LC_", "LANG")
#: read at import, but by nothing that lasts into a command (see the module's docstring)
HARMLESS = frozenset({"HOME"})


def kernos(
    *args: str | Path,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    stdin: int | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``kernos ARGS`` as ``subprocess.run([KERNOS, *args], cwd=cwd, env=env, input=input,
    stdin=stdin, capture_output=True, text=True, timeout=timeout)`` would, in a fork of the
    zygote (``stdin``: None or ``subprocess.DEVNULL``)."""
    assert stdin in (None, subprocess.DEVNULL), "stdin: None (this process's) or DEVNULL"
    argv = [KERNOS, *map(str, args)]
    # relative to this process's cwd, as subprocess.run's (the zygote's cwd is "/")
    where = os.path.join(os.getcwd(), cwd) if cwd is not None else os.getcwd()
    full_env = dict(os.environ if env is None else env)
    if not os.path.isdir(where):  # as subprocess.run raises it
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), where)
    if os.environ.get("KERNOS_TEST_FORK", "1") != "0":
        zygote = _zygote()
        if zygote.can_run(full_env):
            return zygote.run(argv, where, full_env, input, stdin, timeout)
    return subprocess.run(
        argv,
        cwd=where,
        env=None if env is None else dict(env),
        input=input,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class ZygoteError(RuntimeError):
    """The zygote could not start, or would hand a command state a fresh process lacks."""


class Zygote:
    """One pre-warmed process and the unix socket it listens on."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="kz")
        self.path = os.path.join(self._dir, "s")
        self._log = open(os.path.join(self._dir, "log"), "w+b")  # noqa: SIM115 - closed by stop
        env = dict(os.environ)
        self.process = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE.read_text(), self.path, KERNOS],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(30)
            self._log.seek(0)
            raise ZygoteError(f"the kernos zygote did not start:\n{self._log.read().decode()}")
        report = json.loads(line)
        if report["threads"] != 1 or report["fds"] or report["warnings"]:
            self.stop()
            raise ZygoteError(f"the kernos zygote's imports left state a fork would copy: {report}")
        self.env = env
        self.env_read = set(report["env_read"]) - HARMLESS
        self.encoding = locale.getencoding()

    def can_run(self, env: Mapping[str, str]) -> bool:
        """Whether a fork sees ``env`` as a fresh process would: every variable read at import
        or at the interpreter's start is as the zygote had it."""
        if "*" in self.env_read:
            return dict(env) == self.env
        keys = {*env, *self.env}
        start_up = {k for k in keys if k.startswith(START_UP_PREFIXES)}
        return all(env.get(k) == self.env.get(k) for k in start_up | self.env_read)

    def run(
        self,
        argv: Sequence[str],
        cwd: str,
        env: dict[str, str],
        input: str | None,
        stdin_given: int | None,
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        deadline = time.monotonic() + timeout
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        feeder = None
        if stdin_given == subprocess.DEVNULL:
            stdin = os.open(os.devnull, os.O_RDONLY)
        elif input is None:
            stdin = 0  # this process's, as subprocess.run passes it
        else:
            stdin, in_w = os.pipe()
            feeder = threading.Thread(target=_feed, args=(in_w, input.encode(self.encoding)))
            feeder.start()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            body = json.dumps({"argv": list(argv), "cwd": cwd, "env": env}).encode()
            socket.send_fds(conn, [struct.pack("!I", len(body))], [stdin, out_w, err_w])
            conn.sendall(body)
        finally:
            for fd in (out_w, err_w) + ((stdin,) if stdin != 0 else ()):
                os.close(fd)
        try:
            return self._wait(conn, list(argv), out_r, err_r, deadline, timeout)
        finally:
            conn.close()
            os.close(out_r)
            os.close(err_r)
            if feeder is not None:
                feeder.join()

    def _wait(
        self,
        conn: socket.socket,
        argv: list[str],
        out_r: int,
        err_r: int,
        deadline: float,
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        messages = b""
        pid: int | None = None
        returncode: int | None = None
        with selectors.DefaultSelector() as selector:
            for fd in (out_r, err_r, conn.fileno()):
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    _kill(pid)
                    if returncode is None:  # as subprocess.run, wait for the killed process
                        _read_until_ended(conn, messages)
                    expired = subprocess.TimeoutExpired(
                        argv,
                        timeout,
                        output=b"".join(chunks[out_r]),
                        stderr=b"".join(chunks[err_r]),
                    )
                    expired.pid = pid  # type: ignore[attr-defined]  # gone, as a test may check
                    raise expired
                for key, _ in selector.select(left):
                    fd = int(key.fd)
                    data = os.read(fd, 65536)
                    if not data:
                        selector.unregister(fd)
                    elif fd in chunks:
                        chunks[fd].append(data)
                    else:
                        messages += data
                        for line in messages.splitlines():
                            message = json.loads(line)
                            pid = message.get("pid", pid)
                            returncode = message.get("returncode", returncode)
        if returncode is None:
            raise ZygoteError(f"the kernos zygote lost {argv}: {messages!r}")
        return subprocess.CompletedProcess(
            argv, returncode, self._text(chunks[out_r]), self._text(chunks[err_r])
        )

    def _text(self, chunks: list[bytes]) -> str:
        # as subprocess's text mode decodes: the locale's encoding, universal newlines
        text = b"".join(chunks).decode(self.encoding)
        return text.replace("\r\n", "\n").replace("\r", "\n")

    def stop(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()  # its stdin's EOF: it reaps what has ended and exits
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def _feed(fd: int, data: bytes) -> None:
    try:
        with open(fd, "wb") as pipe:
            pipe.write(data)
    except BrokenPipeError:
        pass  # as subprocess.run's communicate: the command need not read all of it


def _read_until_ended(conn: socket.socket, messages: bytes, wait: float = 30) -> None:
    """Read the zygote's messages until it says the command's process has ended."""
    conn.settimeout(wait)
    with contextlib.suppress(OSError):
        while b"returncode" not in messages:
            data = conn.recv(4096)
            if not data:
                return
            messages += data


def _kill(pid: int | None) -> None:
    """Kill the timed-out command and whatever it started in its session."""
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # it had not yet called setsid


_lock = threading.Lock()
_zygotes: dict[int, Zygote] = {}


def _zygote() -> Zygote:
    """This process's zygote, started on first use (a forked pytest process starts its own)."""
    with _lock:
        zygote = _zygotes.get(os.getpid())
        if zygote is None:
            zygote = _zygotes[os.getpid()] = Zygote()
            atexit.register(zygote.stop)
        return zygote
