"""The pre-warmed process behind :func:`tests._cli.kernos` (run as ``python -c``, never imported).

It imports what a ``kernos run`` imports, once, then waits on a unix socket. Each request (argv,
cwd, env, and the stdin/stdout/stderr fds passed with SCM_RIGHTS) gets a "waiter" fork, which
forks the command's process and reports its pid and then its exit status on the request's
connection. The command's process is set up as a fresh ``kernos`` process would be (its own
session, cwd, environment, argv, stdio, signal dispositions) and runs the console script's entry
point, :func:`kernos.cli.main`, then ends as the interpreter would (thread join, exit hooks,
flushed streams). The zygote itself has one thread and no fd but its socket and its stdio.

argv: the unix socket's path, the ``kernos`` console script's path.
"""

import contextlib
import gc
import importlib
import io
import json
import os
import signal
import socket
import struct
import sys
import traceback
import warnings

SOCKET_PATH, SCRIPT = sys.argv[1], sys.argv[2]
# a fresh `kernos` has the script's directory first on sys.path, not `python -c`'s cwd ("")
sys.path[0] = os.path.dirname(SCRIPT)
os.chdir("/")  # whatever reads the cwd at import reads a cwd no command has

#: the modules a `kernos run` imports (the kernos ones; they import the rest) and the few
#: third-party ones it imports inside functions
PRELOAD = (
    "kernos.cli",
    "kernos.cli.run",
    "kernos.cli._common",
    "kernos.cli._exit",
    "kernos.cli._approve",
    "kernos.cli._usage_store",
    "kernos.cli._waiting",
    "kernos.cli._table",
    "kernos._app",
    "kernos.runtime",
    "kernos.runtime._runtime",
    "kernos.runtime._models._models",
    "kernos.runtime._models._chat",
    "kernos.runtime._models._lean_models",
    "kernos.runtime._models._lean_wire",
    "kernos.runtime._models._model_adapter",
    "kernos.runtime._session._lean",
    "kernos.runtime._session._sessions",
    "kernos.runtime._store",
    "kernos.runtime._trace",
    "kernos.runtime._config",
    "kernos.runtime._rules",
    "kernos.tasks",
    "kernos.tasks._manager",
    "kernos.tasks._tools",
    "kernos.tasks._store",
    "kernos.tools",
    "kernos.tools._builtin",
    "kernos.tools._mcp",
    "kernos.tools._mcp_auth",
    "kernos.tools._catalog",
    "kernos.boundary",
    "kernos.output",
    "kernos.compress",
    "anyio._backends._asyncio",
    "genai_prices.data",
    "pydantic_ai.profiles.openai",
    "rich.console",
    "rich.text",
    "rich.markup",
    "typer._adapters",
)

#: the signal dispositions this process started with, as a fresh python process has them
SIGNALS = {
    number: signal.getsignal(number)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD, signal.SIGHUP)
}


def _preload() -> dict[str, object]:
    """Import :data:`PRELOAD`, noting every environment variable read meanwhile."""
    environ = type(os.environ)
    real = {name: getattr(environ, name) for name in ("__getitem__", "__contains__", "__iter__")}
    read: set[str] = set()

    def getitem(self, key):
        read.add(key)
        return real["__getitem__"](self, key)

    def contains(self, key):
        read.add(key)
        return real["__contains__"](self, key)

    def iterate(self):
        read.add("*")  # every variable: a command whose environment differs at all is not forked
        return real["__iter__"](self)

    environ.__getitem__, environ.__contains__, environ.__iter__ = getitem, contains, iterate
    try:
        with warnings.catch_warnings(record=True) as caught:
            for name in PRELOAD:
                importlib.import_module(name)
    finally:
        for name, method in real.items():
            setattr(environ, name, method)
    gc.collect()
    gc.freeze()  # the imported objects stay shared with the forks (the collector never writes them)
    return {
        "env_read": sorted(read),
        "warnings": [str(w.message) for w in caught],  # a fresh process would show them again
        "threads": len(os.listdir("/proc/self/task")),  # a fork copies one: there must be one
    }


def _stream(fd: int, name: str, like: io.TextIOWrapper, line_buffering: bool) -> io.TextIOWrapper:
    """``sys.std*`` as the interpreter makes it at start-up (``create_stdio``)."""
    raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
    raw.name = name  # type: ignore[misc]
    buffered: io.BufferedIOBase = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
    stream = io.TextIOWrapper(
        buffered,
        encoding=like.encoding,
        errors=like.errors,
        newline="\n",
        line_buffering=line_buffering,
    )
    stream.mode = "r" if fd == 0 else "w"  # type: ignore[misc]
    return stream


def _command(request: dict, fds: list[int]) -> int:
    """In the command's process: become a fresh ``kernos`` process and run it; its exit status."""
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for number, handler in SIGNALS.items():
        signal.signal(number, handler)
    zygote_streams = (sys.stdin, sys.stdout, sys.stderr)
    sys.stdin = sys.__stdin__ = _stream(0, "<stdin>", zygote_streams[0], os.isatty(0))
    sys.stdout = sys.__stdout__ = _stream(1, "<stdout>", zygote_streams[1], os.isatty(1))
    sys.stderr = sys.__stderr__ = _stream(2, "<stderr>", zygote_streams[2], True)
    sys.argv = list(request["argv"])
    code: object = 0
    try:
        from kernos.cli import main

        sys.exit(main())  # what the console script does
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        traceback.print_exc()
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # the interpreter dies of SIGINT too
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:
        print(code, file=sys.stderr)
        status = 1
    return 120 if _finish() and status == 0 else status


def _finish() -> bool:
    """What the interpreter does at exit: join the threads, run the exit hooks, flush the
    streams. True when a stream could not be flushed (the interpreter then exits 120)."""
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    failed = False
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            failed = True
    return failed


def _send(conn: socket.socket, message: dict) -> None:
    # OSError: the test gave up on this command; it still runs to its end
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")


def _waiter(conn: socket.socket, request: dict, fds: list[int]) -> None:
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            conn.close()
            status = _command(request, fds)
        finally:
            os._exit(status)
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})
    _, status = os.waitpid(pid, 0)
    _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, 4, 3)
    while len(head) < 4:
        head += conn.recv(4 - len(head))
    (size,) = struct.unpack("!I", head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise EOFError("the request ended early")
        body += chunk
    return json.loads(body), list(fds)


def _serve(listener: socket.socket) -> None:
    poller = __import__("select").poll()
    poller.register(0)  # the test process's end of our stdin: EOF when it is gone
    poller.register(listener.fileno())
    while True:
        # the ended waiters are reaped (not ignored), so that the CPU time of the commands counts
        # in this process's children's time, and so in the test process's
        _reap()
        for fd, _ in poller.poll(1000):
            if fd == 0:
                if not os.read(0, 1):
                    _reap()
                    os._exit(0)
                continue
            conn, _ = listener.accept()
            try:
                request, fds = _receive(conn)
            except (OSError, EOFError, ValueError):
                conn.close()
                continue
            if os.fork() == 0:
                try:
                    listener.close()
                    _waiter(conn, request, fds)
                finally:
                    os._exit(0)
            for fd in fds:
                os.close(fd)
            conn.close()


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _open_fds() -> list[int]:
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))  # not the listing's own fd, closed by now
        except OSError:
            continue
        found.append(int(name))
    return found


def main() -> None:
    report = _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(SOCKET_PATH)
    listener.listen(64)
    report["fds"] = [fd for fd in _open_fds() if fd not in (0, 1, 2, listener.fileno())]
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    _serve(listener)


main()
