"""The suite's one wait: poll a condition until it holds, with a deadline, and say on failure
what was awaited and what was last seen. Tests wait for events this way, never for fixed times."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class Alive(Protocol):
    """A process a wait watches: a :class:`subprocess.Popen`, or one with an ``explain()`` that
    says how it ended (``tests.conftest.Worker``: its stderr is read on a thread)."""

    def poll(self) -> int | None: ...


#: how long a wait lasts by default: long, for a loaded machine launching DBOS (a wait that
#: succeeds ends at once, so only a failing test pays it)
TIMEOUT = 90.0
#: how often the condition is checked
INTERVAL = 0.05


def wait_for(
    probe: Callable[[], T | None],
    what: str,
    timeout: float = TIMEOUT,
    *,
    alive: Sequence[Alive] = (),
    interval: float = INTERVAL,
) -> T:
    """``probe()`` once it returns something truthy; fails after ``timeout`` seconds naming
    ``what`` and the last value seen, or at once when a process of ``alive`` has exited (with
    what it wrote on stderr, when that is a pipe no one else reads). ``interval``: the pause
    between probes (0: a probe that is itself the work, racing others, runs back to back)."""
    deadline = time.monotonic() + timeout
    while not (seen := probe()):
        for proc in alive:
            if proc.poll() is not None:
                raise AssertionError(f"{_ended(proc)} waiting for {what} (last: {seen!r})")
        assert time.monotonic() < deadline, f"timed out waiting for {what} (last: {seen!r})"
        time.sleep(interval)
    return seen


def _ended(proc: Alive) -> str:
    """How a process ended: its exit code and, when its stderr is an unread pipe, the end of it."""
    explain = getattr(proc, "explain", None)
    if explain is not None:
        return str(explain())
    assert isinstance(proc, subprocess.Popen)
    said: str | bytes = ""
    if proc.stderr is not None and not proc.stderr.closed:
        try:
            said = proc.communicate(timeout=10)[1] or ""
        except (subprocess.TimeoutExpired, ValueError, OSError):  # its children hold the pipe
            said = ""
    text = said.decode(errors="replace") if isinstance(said, bytes) else said
    tail = "\n".join(text.splitlines()[-20:])
    return f"{proc.args!r} exited {proc.returncode}" + (f", saying:\n{tail}\n" if tail else "")


async def until(
    probe: Callable[[], T | None] | Callable[[], Awaitable[T | None]],
    what: str,
    timeout: float = TIMEOUT,
) -> T:
    """:func:`wait_for` inside an event loop: the loop runs while it waits, and ``probe`` may
    be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        seen = probe()
        if inspect.isawaitable(seen):
            seen = await seen
        if seen:
            return seen  # type: ignore[return-value]
        assert time.monotonic() < deadline, f"timed out waiting for {what} (last: {seen!r})"
        await asyncio.sleep(INTERVAL)
