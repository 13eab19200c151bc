"""Budgets: how long a session may run and how many model requests and tokens it may use.

Pure rules, no clock or I/O: :func:`parse_duration` reads ``"30s"``/``"10m"``/``"1h"``,
:func:`pick_budget` lays a target's own limits over the ``[tasks]`` defaults, and
:class:`BudgetMeter` counts what a session used and refuses the next model request once a limit is
reached. Every engine calls ``Session._before_request()`` right before it sends a request; that is
where the meter is asked (the wall-clock ``timeout`` is the task scheduler's, an asyncio timeout).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from kernos.errors import BudgetExceeded as BudgetExceeded

#: ``1h30m``, ``10m``, ``45s``, ``1.5h``; units s/m/h, largest first, each at most once
_DURATION = re.compile(
    r"^\s*(?:(?P<h>\d+(?:\.\d+)?)\s*h)?\s*(?:(?P<m>\d+(?:\.\d+)?)\s*m)?\s*"
    r"(?:(?P<s>\d+(?:\.\d+)?)\s*s)?\s*$",
    re.IGNORECASE,
)

#: the limits that hold when nothing is configured (``0`` in the config lifts each): a main agent
#: and a child stop after 50 model requests, a child after 30 minutes, and a model answer's tool
#: calls past the 32nd are answered ``too_many_tool_calls`` instead of run (README, "Bounds")
DEFAULT_MAX_TURNS = 50
DEFAULT_CHILD_TIMEOUT = 30 * 60.0
DEFAULT_MAX_TOOL_CALLS_PER_TURN = 32

DURATION_FIX = 'write a duration such as "30s", "10m", "1h" or "1h30m" (0: no limit)'
COUNT_FIX = "write a whole number of 1 or more (0: no limit)"


def parse_duration(value: Any) -> float:
    """Seconds in ``value``: a number of seconds or a text like ``"90s"``, ``"10m"``, ``"1h30m"``.

    ``0`` (or ``"0s"``) is 0.0, which budgets read as "no limit".

    Raises:
        ValueError: not a duration, or negative; the message says what was given.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        else:
            match = _DURATION.match(text)
            if not text or match is None or not any(match.groupdict().values()):
                raise ValueError(f"{value!r} is not a duration")
            parts = {k: float(v) for k, v in match.groupdict().items() if v}
            seconds = parts.get("h", 0) * 3600 + parts.get("m", 0) * 60 + parts.get("s", 0)
    else:
        raise ValueError(f"{value!r} is not a duration")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{value!r} is negative or not finite")
    return seconds


def format_duration(seconds: float) -> str:
    """``600`` → ``"10m"``, ``5400`` → ``"1h30m"``, ``2.5`` → ``"2.5s"``: how a limit is shown."""
    if seconds != int(seconds) or seconds < 60:
        return f"{seconds:g}s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    shown = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return shown + (f"{secs}s" if secs else "")


def parse_count(value: Any) -> int:
    """A ``max_turns``/``max_tokens`` value: a whole number ≥ 0 (0: no limit).

    Raises:
        ValueError: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a whole number of 0 or more")
    return value


@dataclass(frozen=True)
class Budget:
    """The limits of one run; ``None`` is no limit."""

    timeout: float | None = None
    max_turns: int | None = None
    max_tokens: int | None = None
    #: how many tool calls of one model answer run; the rest are answered ``too_many_tool_calls``
    max_tool_calls_per_turn: int | None = None

    def __bool__(self) -> bool:
        return any(
            v is not None
            for v in (self.timeout, self.max_turns, self.max_tokens, self.max_tool_calls_per_turn)
        )


#: what a main agent runs within when nothing is configured (``kernos run``, ``kernos mcp``)
MAIN_DEFAULTS = Budget(
    max_turns=DEFAULT_MAX_TURNS, max_tool_calls_per_turn=DEFAULT_MAX_TOOL_CALLS_PER_TURN
)
#: what a child runs within when neither its target nor ``[tasks]`` sets a limit
CHILD_DEFAULTS = Budget(
    timeout=DEFAULT_CHILD_TIMEOUT,
    max_turns=DEFAULT_MAX_TURNS,
    max_tool_calls_per_turn=DEFAULT_MAX_TOOL_CALLS_PER_TURN,
)

_KEYS = ("timeout", "max_turns", "max_tokens", "max_tool_calls_per_turn")


def pick_budget(defaults: Any, *targets: Any, fallback: Budget | None = None) -> Budget:
    """The budget of a run: for each limit, the first target (an agent or category config) that
    sets it, else ``defaults`` (``[tasks]``), else ``fallback`` (kernos's own defaults);
    ``0`` anywhere it is chosen means no limit.

    Args:
        defaults: an object with the :class:`Budget` keys (``None``: unset).
        targets: the same, most specific first; ``None`` entries are skipped.
        fallback: the limits when nothing sets them (:data:`MAIN_DEFAULTS`,
            :data:`CHILD_DEFAULTS`); ``None``: no limit.
    """
    chosen: dict[str, Any] = {}
    for key in _KEYS:
        value = None
        for source in (*targets, defaults, fallback):
            if source is not None and getattr(source, key, None) is not None:
                value = getattr(source, key)
                break
        chosen[key] = value or None  # 0 lifts a default: no limit
    return Budget(**chosen)


def tool_calls_allowed(meter: BudgetMeter | None) -> int | None:
    """How many tool calls of one model answer a session runs: its budget's
    ``max_tool_calls_per_turn`` (``None``: no limit), or the default for a session without a
    budget (one made directly, not by a runtime)."""
    if meter is None:
        return DEFAULT_MAX_TOOL_CALLS_PER_TURN
    return meter.budget.max_tool_calls_per_turn


def too_many_tool_calls_text(limit: int) -> str:
    """What a tool call past the per-turn cap answers (it was not run)."""
    return (
        f"Not run: one answer runs at most {limit} tool calls and this call came after them. "
        f"Make at most {limit} tool calls per turn; send this call again next turn if you "
        "still need it."
    )


@dataclass
class BudgetMeter:
    """What one run used so far, against its :class:`Budget`.

    ``before_request`` is called right before each model request: it raises once a limit is
    reached, else counts the request. ``add_tokens`` adds a response's input + output tokens.
    """

    budget: Budget
    requests: int = 0
    tokens: int = 0
    #: how many of the session's history messages were counted already
    seen: int = 0

    def add_tokens(self, count: int) -> None:
        self.tokens += max(count, 0)

    def before_request(self) -> None:
        """Count one more model request, or raise if the run may not send it.

        Raises:
            BudgetExceeded: ``max_turns`` requests were sent already, or ``max_tokens`` are used.
        """
        turns, tokens = self.budget.max_turns, self.budget.max_tokens
        if turns is not None and self.requests >= turns:
            noun = "request" if self.requests == 1 else "requests"
            raise BudgetExceeded("max_turns", str(turns), f"{self.requests} model {noun} made")
        if tokens is not None and self.tokens >= tokens:
            raise BudgetExceeded("max_tokens", str(tokens), f"{self.tokens} tokens used")
        self.requests += 1
