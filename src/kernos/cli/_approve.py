"""Answering asked tool calls from the CLI: ``--approve GLOB`` / ``--yes``, and a prompt on the
terminal (stdin and stderr both TTYs) answered ``y`` (this call), ``a`` (this tool for the rest of
the run) or ``n`` (deny, then an optional reason the model reads)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernos.runtime import ApprovalAnswer, ApprovalRequest, Approver

#: how a ``kernos run`` that cannot ask says to allow a tool
RUN_HINT = (
    "rerun with --approve {tool} (or --yes to approve every asked call), or allow it in "
    'kernos.toml: [permissions] allow = ["{tool}"]'
)
QUESTION = "approve? [y] this call, [a] {tool} for the rest of the run, [n] deny: "
REASON = "reason (enter to skip): "
#: ``how`` a call answered at the terminal is kept in the store, and the reasons an ``a`` keeps
TERMINAL = "terminal"
ALWAYS = "a: approved for the rest of the run"
ALWAYS_BEFORE = "answered a earlier: approved for the rest of the run"


async def read_stdin_line() -> str:
    """One line from stdin (``""`` at end of input), read in a daemon thread so a cancelled
    run is never held by a read that cannot end."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()

    def settle(line: str) -> None:
        if not done.done():
            done.set_result(line)

    def work() -> None:
        try:
            line = sys.stdin.readline()
        except (OSError, ValueError):
            line = ""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(settle, line)

    threading.Thread(target=work, name="kernos-approve", daemon=True).start()
    return await done


def _write_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


class TerminalApprover:
    """Asks the person at the terminal, one request at a time."""

    def __init__(
        self,
        *,
        write: Callable[[str], None] = _write_stderr,
        read_line: Callable[[], Awaitable[str]] = read_stdin_line,
    ) -> None:
        self.write = write
        self.read_line = read_line
        #: tools answered ``a``: approved for the rest of the run
        self.always: set[str] = set()
        self._lock = asyncio.Lock()

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        from kernos.runtime import ApprovalAnswer, request_text, user_name

        who = {"by": user_name(), "how": TERMINAL}
        async with self._lock:
            if request.tool in self.always:
                return ApprovalAnswer(True, ALWAYS_BEFORE, **who)
            self.write(request_text(request))
            while True:
                self.write(QUESTION.format(tool=request.tool))
                line = await self.read_line()
                answer = line.strip().lower()
                if not line:  # end of input: nobody will answer
                    self.write("\n")
                    return ApprovalAnswer(False, "nobody answered (end of input)", how=TERMINAL)
                if answer in ("y", "yes"):
                    return ApprovalAnswer(True, **who)
                if answer in ("a", "always"):
                    self.always.add(request.tool)
                    return ApprovalAnswer(True, ALWAYS, **who)
                if answer in ("n", "no"):
                    self.write(REASON)
                    reason = await self.read_line()
                    return ApprovalAnswer(False, reason.strip(), **who)


def is_terminal() -> bool:
    """Whether a person can be asked: stdin and stderr are both terminals."""
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def run_approver(approve: Sequence[str], yes: bool, *, ask: bool | None = None) -> Approver:
    """The approver of a ``kernos run`` or ``kernos chat``: ``--approve`` / ``--yes`` first (the
    run's children too), then the terminal when there is one (``ask``; default:
    :func:`is_terminal`), else refused with ``approval_required`` and :data:`RUN_HINT`."""
    from kernos.runtime import FlagApprover, NoApprover

    terminal = is_terminal() if ask is None else ask
    return FlagApprover(
        tuple(approve),
        yes,
        TerminalApprover() if terminal else None,
        NoApprover(RUN_HINT),
    )
