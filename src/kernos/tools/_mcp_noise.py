"""Lines a stdio MCP server writes on stdout that are not MCP messages: counted per server by a
filter on the SDK's stdio client logger and summarised in one warning, not logged one by one
(:class:`kernos.tools._mcp.McpToolset` installs the filter and sets the tally)."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import Any

from pydantic import ValidationError

log = logging.getLogger("kernos.mcp")

#: while stray stdout lines keep coming, at most one summary per this many seconds
_NOISE_REPORT_EVERY = 60.0


def _warn(message: str) -> None:
    """One warning a person should see: in the log and on stderr (never stdout: under
    ``kernos mcp`` stdout is the protocol)."""
    if log.hasHandlers():  # with none, logging's last resort would print it a second time
        log.warning("%s", message)
    print(f"warning: {message}", file=sys.stderr, flush=True)


class _StdoutNoise:
    """Lines a stdio server wrote on stdout that are not MCP messages: counted, the first kept."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.count = 0
        self.reported = 0
        self.first = ""
        self._last_report: float | None = None

    def add(self, error: BaseException) -> None:
        self.count += 1
        if not self.first:
            self.first = _offending_line(error)
        now = time.monotonic()
        if self._last_report is None:
            self._last_report = now  # the first summary comes a while later, or at close
        elif now - self._last_report >= _NOISE_REPORT_EVERY:
            self.report()

    def report(self) -> None:
        """Warn once about the lines not yet reported (nothing when there are none)."""
        new = self.count - self.reported
        if new <= 0:
            return
        self.reported = self.count
        self._last_report = time.monotonic()
        more = "" if new == self.count else f" more ({self.count:,} in all)"
        _warn(
            f"MCP server [{self.server}] wrote {new:,}{more} lines that are not MCP messages on "
            f"stdout; first: {self.first!r}. A stdio server must write only MCP messages there "
            "(logs go to stderr)"
        )


#: the stray-stdout tally of the MCP server whose connection task is running (the SDK's stdout
#: reader runs in a task of that connection, so it sees the value its server set)
_NOISE: contextvars.ContextVar[_StdoutNoise | None] = contextvars.ContextVar(
    "kernos_mcp_stdout_noise", default=None
)


class _CountStdoutNoise(logging.Filter):
    """On the SDK's stdio client logger: a stdout line that does not parse as an MCP message is
    counted for its server (a traceback per line otherwise floods stderr), not logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        tally = _NOISE.get()
        error = record.exc_info[1] if record.exc_info else None
        if tally is None or not isinstance(error, ValueError):
            return True
        tally.add(error)
        return False


_NOISE_FILTER = _CountStdoutNoise()


def _offending_line(error: BaseException) -> str:
    """The stray line a parse error is about (pydantic keeps it as the error's input), cut short."""
    line: Any = ""
    errors = error.errors() if isinstance(error, ValidationError) else []
    if errors:
        line = errors[0].get("input", "")
    shown = line if isinstance(line, str) else json.dumps(line, default=str)
    return shown if len(shown) <= 120 else shown[:117] + "..."
