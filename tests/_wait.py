"""The suite's one wait: poll a condition until it holds, with a deadline, and say on failure
what was awaited and what was last seen. Tests wait for events this way, never for fixed times."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

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
    alive: Sequence[subprocess.Popen[str]] | Sequence[subprocess.Popen[bytes]] = (),
) -> T:
    """``probe()`` once it returns something truthy; fails after ``timeout`` seconds naming
    ``what`` and the last value seen, or at once when a process of ``alive`` has exited."""
    deadline = time.monotonic() + timeout
    while not (seen := probe()):
        for proc in alive:
            assert proc.poll() is None, f"exited {proc.returncode} waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what} (last: {seen!r})"
        time.sleep(INTERVAL)
    return seen


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
