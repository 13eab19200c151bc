"""Compaction rules: when a session compacts, what it compacts, and what the model sees after.
Pure: wire-shaped messages (the lean loop's plain dicts) in, indexes and messages out; no clock,
file, tokenizer or network (the counting function is passed in).

A *turn* is one model response (an ``assistant`` message), the tool results that answer it and
the messages that led to it; turns are numbered from 1 by their response, which is the same
number in the lean loop's messages, pydantic-ai's history and the store's ``assistant`` rows.
The *head* (the first user prompt) is never compacted, nor are the last ``keep_turns`` turns;
what lies between is the span a summary replaces. A cut only ever falls where no tool call is
on one side and its result on the other.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

#: ``compact_at``'s default: the fraction of the window at which a session compacts
COMPACT_AT = 0.8
#: ``keep_turns``'s default: the newest turns always sent as they are
KEEP_TURNS = 4
#: ``compact_rounds``: drafts the compressor may submit before compaction gives up
COMPACT_ROUNDS = 3
#: the fraction of the threshold below which a request is not counted offline (see
#: :func:`needs_count`)
COUNT_FROM = 0.5

Message = dict[str, Any]


@dataclass(frozen=True)
class CompactSettings:
    """How one session compacts: its model's ``window`` (tokens), the fraction ``at`` of it that
    triggers a compaction before the next request, the turns kept as they are, the model the
    compressor runs on (``None``: the session's) and the compressor's draft budget."""

    window: int
    at: float = COMPACT_AT
    keep_turns: int = KEEP_TURNS
    model: str | None = None
    rounds: int = COMPACT_ROUNDS

    @property
    def threshold(self) -> int:
        """The prompt size, in tokens, from which a session compacts before its request."""
        return math.floor(self.window * self.at)


@dataclass(frozen=True)
class Span:
    """Messages ``[start, end)`` to compact: turns ``first_turn`` to ``last_turn``."""

    start: int
    end: int
    first_turn: int
    last_turn: int


@dataclass(frozen=True)
class Summary:
    """An approved summary of turns ``first_turn`` to ``last_turn`` and its declared losses
    (``(content, reason)`` pairs): what the model is sent instead of those turns."""

    first_turn: int
    last_turn: int
    text: str
    losses: tuple[tuple[str, str], ...] = field(default=())


def head_end(messages: Sequence[Message]) -> int:
    """Index after the first user prompt (0: there is none, nothing can be compacted)."""
    for index, message in enumerate(messages):
        if message.get("role") == "user":
            return index + 1
    return 0


def _calls(message: Message) -> list[str]:
    return [str(c.get("id")) for c in message.get("tool_calls") or () if isinstance(c, dict)]


def turn_ends(messages: Sequence[Message]) -> list[int]:
    """For turn ``k`` (``ends[k - 1]``): the index after its response and the tool results that
    directly follow it."""
    ends: list[int] = []
    index = 0
    while index < len(messages):
        if messages[index].get("role") == "assistant":
            index += 1
            while index < len(messages) and messages[index].get("role") == "tool":
                index += 1
            ends.append(index)
            continue
        index += 1
    return ends


def splits_a_call(messages: Sequence[Message], cut: int) -> bool:
    """Whether cutting before ``messages[cut]`` leaves a tool call and its result apart."""
    before = {call for m in messages[:cut] for call in _calls(m)}
    after_results = {str(m.get("tool_call_id")) for m in messages[cut:] if m.get("role") == "tool"}
    after_calls = {call for m in messages[cut:] for call in _calls(m)}
    answered_before = {
        str(m.get("tool_call_id")) for m in messages[:cut] if m.get("role") == "tool"
    }
    return bool(before & after_results) or bool(after_calls & answered_before)


def span_to_compact(messages: Sequence[Message], keep_turns: int, covered: int = 0) -> Span | None:
    """The turns to compact: from after the head through the turn ``keep_turns`` before the
    last, moved back to the nearest turn end that splits no tool call from its result. ``None``
    when that covers no turn beyond ``covered`` (the turns an earlier summary holds)."""
    start = head_end(messages)
    if start == 0:
        return None
    ends = turn_ends(messages)
    last = len(ends) - max(keep_turns, 0)
    while last > covered:
        end = ends[last - 1]
        if end >= start and not splits_a_call(messages, end) and not splits_a_call(messages, start):
            return Span(start, end, 1, last)
        last -= 1
    return None


def compacted_view(messages: Sequence[Message], summary: Summary | None) -> list[Message]:
    """What the model is sent: the head, one message with the summary, the turns after it."""
    if summary is None:
        return list(messages)
    start = head_end(messages)
    ends = turn_ends(messages)
    if start == 0 or summary.last_turn > len(ends) or summary.last_turn < 1:
        return list(messages)
    end = ends[summary.last_turn - 1]
    return [*messages[:start], summary_message(summary), *messages[end:]]


@cache
def _template() -> str:
    return (
        resources.files("kernos.runtime._rules")
        .joinpath("compaction_summary.md")
        .read_text("utf-8")
    )


def summary_text(summary: Summary) -> str:
    """The text of the message that stands for the compacted turns."""
    if summary.losses:
        losses = "\n".join(
            f"- {content} (dropped because: {reason})" for content, reason in summary.losses
        )
    else:
        losses = "- none declared"
    return (
        _template()
        .strip()
        .format(
            first=summary.first_turn,
            last=summary.last_turn,
            summary=summary.text.strip(),
            losses=losses,
        )
    )


def summary_message(summary: Summary) -> Message:
    return {"role": "user", "content": summary_text(summary)}


def render_transcript(messages: Sequence[Message], first_turn: int = 1) -> str:
    """Messages as a plain transcript for the compressor, turn by turn."""
    lines: list[str] = []
    turn = first_turn - 1
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        text = content if isinstance(content, str) else ("" if content is None else str(content))
        if role == "assistant":
            turn += 1
            lines.append(f"## Turn {turn}: assistant")
            if text:
                lines.append(text)
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                lines.append(
                    f"[tool call {call.get('id')}] {function.get('name')}"
                    f"({function.get('arguments', '')})"
                )
        elif role == "tool":
            lines.append(f"[tool result {message.get('tool_call_id')}]\n{text}")
        elif role == "user":
            lines.append(f"## User\n{text}")
        elif role == "system":
            lines.append(f"## System\n{text}")
        lines.append("")
    return "\n".join(lines).strip() + "\n"


def request_size(messages: Sequence[Message], tools: str, count: Callable[[str], int]) -> int:
    """The offline size of a request: its messages and tool schemas, in ``count``'s tokens."""
    return count(json.dumps(list(messages), ensure_ascii=False)) + (count(tools) if tools else 0)


def calibrated(size: int, last_counted: int | None, last_reported: int | None) -> int:
    """The provider's own count of the last request (``last_reported`` prompt tokens) plus what
    changed since, counted offline (``size - last_counted``): the offline count's error on what
    was already sent (a provider's template, its tool encoding) does not grow with the session.
    ``size`` itself when either is unknown."""
    if last_counted is None or not last_reported:
        return size
    return max(0, last_reported + size - last_counted)


def needs_count(
    last_reported: int | None, added_chars: int | None, settings: CompactSettings
) -> bool:
    """Whether the next request is counted offline before it is sent (counting is linear in the
    request: about a millisecond per thousand tokens, paid on every request of a long session).
    Always until the provider has reported the size of the last request; after, once that size
    plus the characters added since (``added_chars``; a token is rarely shorter than a
    character, and the margin to the threshold absorbs twice that) reaches ``COUNT_FROM`` of the
    threshold."""
    if not last_reported or added_chars is None:
        return True
    return last_reported + max(added_chars, 0) >= settings.threshold * COUNT_FROM


def needs_compaction(size: int, settings: CompactSettings | None) -> bool:
    """Whether a request of ``size`` tokens crosses the threshold (never without a window)."""
    return settings is not None and settings.window > 0 and size >= settings.threshold
