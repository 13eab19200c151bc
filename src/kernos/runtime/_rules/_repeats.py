"""Truncated and repeated tool calls: the pure rules
:class:`kernos.runtime._session._toolset.KernosToolset` applies to every call.

- A call in an answer the provider cut off at its output limit (``finish_reason`` ``length``)
  whose arguments the boundary could not use is answered ``truncated_call``, not ``invalid_json``:
  the model is told its answer was cut, and what to do about it.
- The same invalid call sent again (same tool, same arguments after ``prepare``): from the second
  repetition its coded error says so, and what to change (the tool's retry budget still bounds it).
- The same successful call sent again in a row: from the ``repeat_limit``-th identical call
  (``[tasks] repeat_limit``, default 3, ``0`` off), its result starts with a coded
  ``repeated_call`` note saying the model already has this result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kernos.boundary import ToolResult

#: ``[tasks] repeat_limit``'s default: the identical successful call that gets the note
REPEAT_LIMIT = 3
#: the identical invalid call whose error names the repetition (the second repetition)
INVALID_REPEAT = 3


def call_key(args: Any) -> str:
    """A call's arguments as one comparable text (object keys sorted)."""
    if isinstance(args, str):
        return args
    try:
        return json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return repr(args)


@dataclass
class RepeatGuard:
    """Counts identical calls in a row (one session's): same tool, same arguments, same outcome.
    Any other call in between starts the count again."""

    last: tuple[str, str, bool] | None = None
    count: int = 0

    def see(self, name: str, key: str, ok: bool) -> int:
        """Count this call; how many times in a row it was sent, this one included."""
        current = (name, key, ok)
        self.count = self.count + 1 if current == self.last else 1
        self.last = current
        return self.count


def truncated_call_result(name: str, output_tokens: int | None) -> ToolResult:
    """The coded ``truncated_call`` answer to a call cut off at the provider's output limit."""
    limit = (
        f" at its output token limit ({output_tokens} tokens)"
        if output_tokens
        else " at its output token limit"
    )
    text = (
        f"Your call of `{name}` was cut off: the provider stopped your answer{limit} before the "
        "call's arguments were complete, so it was not run. Send shorter arguments, or split the "
        "work into several smaller calls; if a call this size is needed, raise `max_tokens` "
        "(the output token limit) in the model's configuration."
    )
    details: dict[str, Any] = {"code": "truncated_call", "stage": "json", "tool": name}
    if output_tokens:
        details["output_tokens"] = output_tokens
    return ToolResult(text, details, is_error=True)


def repeated_error_text(text: str, name: str, times: int) -> str:
    """An invalid call's coded error, with the sentence naming its repetition."""
    return (
        f"{text}\nYou sent this same call of `{name}` {times} times and it failed the same way "
        "each time: change the arguments as this message says, call another tool, or answer."
    )


def repeated_call_note(name: str, times: int) -> str:
    """The coded ``repeated_call`` note put before a successful result sent again (outside the
    delimiters of a tool kernos did not write: the note is kernos's own text)."""
    return (
        f"[repeated_call] You called `{name}` with these same arguments {times} times in a row "
        "and already have this result: use it, change the arguments, or answer."
    )


def repeat_due(limit: int, times: int) -> bool:
    """Whether the ``times``-th identical successful call gets the note (``limit`` 0: never)."""
    return limit > 0 and times >= limit
