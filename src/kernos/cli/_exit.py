"""The end of a ``kernos`` process, once its command is over.

Two things could keep a process alive after its answer is out, and neither may: a thread the
command left running that the interpreter would wait for at exit (a worker thread of a thread
pool, joined by :mod:`concurrent.futures`'s exit hook), and an exit hook or finalizer that
blocks. The first is given :data:`THREAD_GRACE` seconds to end; one still running then is named
in ``kernos.log`` with its stack, and the process exits at once with the command's exit code.
For the second the interpreter's own watchdog (:mod:`faulthandler`, which needs no lock of
Python's and so fires even in the interpreter's finalization) writes every thread's stack to
``kernos.log`` (stderr without one) after :data:`EXIT_DEADLINE` seconds and exits 1.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any

log = logging.getLogger("kernos")

#: how long the threads a command left running may take to end
THREAD_GRACE = 10.0
#: how long the interpreter may take to end once the command is over
EXIT_DEADLINE = 30.0


def end(code: int | str | None) -> None:
    """Make sure the process ends soon after its command, with ``code`` (``SystemExit``'s)."""
    _arm_deadline()
    left = _left_running()
    if left:
        _leave(left, _exit_status(code))


def _left_running() -> list[threading.Thread]:
    """The threads the interpreter would wait for that are still running after the grace."""
    current = threading.current_thread()
    waited = [
        t for t in threading.enumerate() if t is not current and not t.daemon and t.is_alive()
    ]
    until = time.monotonic() + THREAD_GRACE
    for thread in waited:
        thread.join(max(0.0, until - time.monotonic()))
    return [t for t in waited if t.is_alive()]


def _leave(threads: list[threading.Thread], status: int) -> None:
    """Name ``threads`` and where each is in the log, flush what was written, and exit."""
    frames = sys._current_frames()
    where = "\n".join(
        f"thread {t.name}:\n" + "".join(traceback.format_stack(frames[t.ident]))
        for t in threads
        if t.ident in frames
    )
    log.warning(
        "kernos: %d thread(s) still running %g s after the command ended; exiting without "
        "them:\n%s", len(threads), THREAD_GRACE, where,
    )  # fmt: skip
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    logging.shutdown()
    os._exit(status)


def _exit_status(code: int | str | None) -> int:
    """The status ``sys.exit(code)`` would give: 0 for none, the number, 1 for a message."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _arm_deadline() -> None:
    target: Any = sys.stderr
    for handler in log.handlers:
        if isinstance(handler, logging.FileHandler):
            # a stream of its own: the handler's is closed by logging's exit hook
            with contextlib.suppress(OSError):
                target = open(handler.baseFilename, "a", encoding="utf-8")  # noqa: SIM115
            break
    # no usable stream (stderr closed, or replaced by one without a file): no watchdog
    with contextlib.suppress(ValueError, OSError, AttributeError, RuntimeError):
        faulthandler.dump_traceback_later(EXIT_DEADLINE, exit=True, file=target)
