"""Every public exception of kernos, in one tree.

::

    KernosError                      catch kernos, and nothing else
    ├── ConfigError                  configuration or state a person must fix: exit 2 with the fix
    │   ├── NoModelError             no model named anywhere
    │   ├── StoreError               the store is damaged, unreachable or cannot be created
    │   └── McpServerError           an MCP server did not start, or its tools collide
    │       └── McpLoginNeeded       an OAuth MCP server has no usable login: ``kernos mcp login``
    ├── CassetteError                a cassette cannot be read, or cannot answer a request
    ├── ToolError                    a call refused: ``code`` for programs, a sentence for the model
    │   ├── PathRefused              a tool's path outside what the workspace allows
    │   ├── WorkspaceRefused         the workspace policy refused a path, URL or recipient
    │   ├── PatternTooComplex        a search pattern too long or too costly to compile
    │   ├── OutputArgumentError      an ``output_send`` batch that cannot be sent as it is
    │   ├── OutputBlocked            a ``before_output`` hook vetoed an item
    │   ├── ChannelError             a channel could not send one item
    │   └── CompressError            a compress protocol step out of order
    ├── RunStopped                   a run stopped before its answer
    │   ├── BudgetExceeded           a limit reached (``max_turns``, ``max_tokens``, ``timeout``)
    │   ├── EmptyAnswers             the model answered with nothing, again and again
    │   ├── ContextExhausted         the context window is full and compaction was not approved
    │   ├── RunTimedOut              ``kernos run --timeout`` was up
    │   └── Interrupted              a signal stopped it (``exit_code`` 128 + signal)
    └── NotRegularFile               (an ``OSError`` too) not the regular file it was said to be

A model request's own failures are pydantic-ai's ``ModelAPIError`` family on every engine
(:func:`kernos.runtime.model_failure` turns them into one line); the lean wire's
``ModelResponseError`` is one of them and a :class:`KernosError` too.

The older import paths (``kernos.boundary.ToolError``, ``kernos.runtime.ConfigError``,
``kernos.output.ChannelError``...) name these same classes. This module imports nothing of kernos,
so every layer (the boundary included) can raise from it.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "NO_MODEL_MESSAGE",
    "BudgetExceeded",
    "CassetteError",
    "ChannelError",
    "CompressError",
    "ConfigError",
    "ContextExhausted",
    "EmptyAnswers",
    "Interrupted",
    "KernosError",
    "McpLoginNeeded",
    "McpServerError",
    "NoModelError",
    "NotRegularFile",
    "OutputArgumentError",
    "OutputBlocked",
    "PathRefused",
    "PatternTooComplex",
    "RunStopped",
    "RunTimedOut",
    "StoreError",
    "ToolError",
    "WorkspaceRefused",
]


class KernosError(Exception):
    """The root of kernos's own errors."""


# -- configuration and state ---------------------------------------------------------------------
class ConfigError(KernosError):
    """The configuration is wrong: ``file``, ``key`` and ``fix`` say where and what to do.

    ``others`` holds further problems found in the same pass (``kernos config check`` lists them
    all; other commands show the first).
    """

    def __init__(self, file: str | Path | None, key: str, problem: str, fix: str) -> None:
        self.file = str(file) if file is not None else "(config)"
        self.key = key
        self.problem = problem
        self.fix = fix
        self.others: list[ConfigError] = []
        super().__init__(f"{self.file}: {key}: {problem}; {fix}")


NO_MODEL_MESSAGE = (
    "no model configured: pass --model, set KERNOS_MODEL, or set default_model in kernos.toml"
)


class NoModelError(ConfigError):
    """No model was named anywhere."""

    def __init__(self) -> None:
        super().__init__(None, "default_model", "no model configured", "see below")
        self.args = (NO_MODEL_MESSAGE,)

    def __str__(self) -> str:
        return NO_MODEL_MESSAGE


class StoreError(ConfigError):
    """The store cannot be used: its file is damaged, missing a table, or cannot be created.

    A state error (exit 2): the message names the file and says what to do, e.g. move a damaged
    ``kernos.db`` aside so the next run starts a fresh one.
    """

    def __init__(self, path: Path | str | None, problem: str, fix: str) -> None:
        super().__init__(path, "(store)", problem, fix)
        self.args = (str(self),)

    def __str__(self) -> str:
        return f"{self.file}: {self.problem}; {self.fix}"


class McpServerError(ConfigError):
    """An MCP server did not start, or its tools cannot be offered (names collide)."""


class McpLoginNeeded(McpServerError):
    """An ``auth = "oauth"`` MCP server has no usable login: no tokens stored, or they expired
    and could not be refreshed. The fix names ``kernos mcp login NAME``; nothing waits for a
    browser."""

    def __init__(self, file: str | Path | None, server: str, problem: str) -> None:
        super().__init__(file, f"mcp.{server}", problem, f"run `kernos mcp login {server}`")
        self.server = server


class CassetteError(KernosError):
    """A cassette cannot be read, or cannot answer a request (a replayed run went another way):
    ``str(error)`` says which."""


# -- tool calls ----------------------------------------------------------------------------------
class ToolError(KernosError):
    """A semantic rejection the model should read and act on.

    Args:
        code: a stable machine code (``prompt_and_tasks``); kept in logs and the store.
        message: the sentence the model reads; says what is wrong and what to do.
        details: structured extras for logs and UIs.
    """

    def __init__(self, code: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolError):
            return NotImplemented
        return (self.code, self.message, self.details) == (other.code, other.message, other.details)

    __hash__ = None  # type: ignore[assignment]


class PathRefused(ToolError):
    """A model-supplied path the workspace does not allow; the message says what to do instead."""

    def __init__(self, message: str) -> None:
        super().__init__("path_refused", message)


class WorkspaceRefused(ToolError):
    """The workspace policy refused a model-supplied path, URL or recipient (code
    ``path_refused``).

    ``str(error)`` is one sentence for the model, e.g. ``attachment refused: /etc/passwd is outside
    the workspace (roots: /srv/app); send a file inside it``. Nothing refused was read.
    """

    def __init__(self, message: str) -> None:
        super().__init__("path_refused", message)


class PatternTooComplex(ToolError, ValueError):
    """A pattern refused before it runs (code ``pattern_too_complex``): too long, or its counted
    repeats would make compiling it blow up; ``str(error)`` says which and what to send instead."""

    def __init__(self, message: str) -> None:
        super().__init__("pattern_too_complex", message)


class OutputArgumentError(ToolError):
    """The call's arguments cannot be sent as they are; nothing was sent.

    Args:
        code: ``missing_payload``, ``empty_entry``, ``invalid_entry``, ``length_mismatch``,
            ``too_many_items`` (parsing), or ``not_authorized``, ``unknown_channel`` (the gate).
        message: the sentence the model reads; says what to change.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)


class OutputBlocked(ToolError):
    """Raised by a ``before_output`` hook to veto an item (code ``blocked``): it fails with
    ``blocked by plugin: <reason>``."""

    def __init__(self, reason: str) -> None:
        super().__init__("blocked", reason)
        self.reason = reason


class ChannelError(ToolError):
    """A handler could not send one item (code ``channel_failed``); ``str(error)`` is what the
    model reads, verbatim.

    Example: ``ChannelError("unsupported type 'x'; this channel sends: text, image")``.
    """

    def __init__(self, message: str = "", code: str = "channel_failed") -> None:
        super().__init__(code, message)


class CompressError(ToolError):
    """A protocol step out of order (approve with no draft, or before its review).

    The ``approve`` tool hands the message to the model, so it says what to do next.
    """

    def __init__(self, message: str, code: str = "out_of_order") -> None:
        super().__init__(code, message)


# -- runs that stop ------------------------------------------------------------------------------
class RunStopped(KernosError):
    """A run stopped before its answer: a limit, a timeout, a signal, a model that said nothing."""


class BudgetExceeded(RunStopped):
    """A run reached one of its limits and was stopped before its next model request (or, for
    ``timeout``, when the time was up).

    Attributes:
        code: ``budget_exceeded`` (``max_turns``, ``max_tokens``) or ``timeout``.
        limit: which limit: ``max_turns``, ``max_tokens`` or ``timeout``.
        value: the limit as configured, as a person reads it (``"3"``, ``"10m"``).
        used: what the run had used when it was stopped (``"3 model requests"``).
    """

    def __init__(self, limit: str, value: str, used: str) -> None:
        self.limit = limit
        self.value = value
        self.used = used
        self.code = "timeout" if limit == "timeout" else "budget_exceeded"
        super().__init__(f"{self.code}: {limit} = {value} reached ({used})")


class EmptyAnswers(RunStopped):
    """The model answered with no text and no tool call ``count`` times in a row."""

    def __init__(self, model: str, count: int) -> None:
        self.model = model
        self.count = count
        super().__init__(f"the model returned no text and no tool call {count} times in a row")


class ContextExhausted(RunStopped):
    """The next request would pass ``compact_at`` of the model's context window and compacting
    the session's middle turns did not end with an approved summary (or there was nothing left
    to compact): the session stops rather than truncate silently.

    Attributes:
        code: ``context_exhausted``.
        tried: what was tried, in one sentence.
    """

    code = "context_exhausted"

    def __init__(self, tried: str) -> None:
        self.tried = tried
        super().__init__(f"context_exhausted: {tried}")


class RunTimedOut(RunStopped):
    """The whole run reached its ``--timeout``; the run and its children were cancelled."""


class Interrupted(RunStopped):
    """The run was stopped by a signal; ``exit_code`` is ``128 + signum`` (130 SIGINT, 143
    SIGTERM)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


# -- files ---------------------------------------------------------------------------------------
class NotRegularFile(KernosError, OSError):
    """A path that is not a regular file (a FIFO, a device, a directory), or not the file it named
    when it was checked (it was swapped meanwhile); nothing was read from it."""
