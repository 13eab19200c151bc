"""A kernos command on a real pseudo-terminal, for the tests of its interactive commands."""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import subprocess
import termios
import threading
from pathlib import Path

from kernos.testing import FakeOpenAIServer
from tests.conftest import KERNOS


def environment(project: Path, server: FakeOpenAIServer) -> dict[str, str]:
    """The environment of a kernos process of ``project`` talking to ``server``."""
    return {**os.environ, **server.env(), "KERNOS_HOME": str(project / ".kernos")}


class Terminal:
    """``kernos <args>`` on a pseudo-terminal of 30x140, its controlling terminal (so Ctrl-C is
    a SIGINT for it), everything it writes read as it comes. The terminal's size is the pty's
    own, not COLUMNS/LINES inherited from the runner (rich prefers them)."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 140, 0, 0))
        #: the terminal's modes before the command ran (it must give them back)
        self.modes = termios.tcgetattr(self.slave)
        env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
        self.proc = subprocess.Popen(
            [KERNOS, *args], cwd=cwd, env={**env, "TERM": "xterm-256color"},
            stdin=self.slave, stdout=self.slave, stderr=self.slave, start_new_session=True,
            preexec_fn=self._controlling,
        )  # fmt: skip
        self.output = b""
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    @staticmethod
    def _controlling() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        # as an interactive shell starts a foreground job: a shell without job control (a CI
        # script, ``cmd &``) hands its children SIGINT and SIGQUIT ignored, and an ignored
        # SIGINT stays ignored across exec, so Ctrl-C would never reach the command
        for signum in (signal.SIGINT, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                self.output += data

    def written(self) -> str:
        """All the command wrote so far, escape codes and all."""
        with self.lock:
            return self.output.decode("utf-8", errors="replace")

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.slave)
        os.close(self.master)
