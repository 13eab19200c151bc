"""Stored turns back into a conversation: the rows a :class:`~kernos.runtime.Session` records
(``turns`` table) as the ``list[ModelMessage]`` it continues from. Pure: plain rows in, messages
out, no clock, file or network.

What a turn keeps is what the model saw: user text, assistant text and tool calls with their ids
and arguments, and each tool result's text. A result is restored as a plain tool return holding
that text, which is the text it went to the model as (a retry's wrapped error included). Token
counts come back on each response, so a restored history is never counted as new usage.

A history must be well formed for a provider to take it: every tool call answered, no answer
without its call. Rows a killed process or a hand-edited store left half-written are repaired
rather than raised on: an unanswered call gets a result saying that none was recorded, a result
whose call is missing is dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from kernos.runtime._store._store import Store

#: the result a restored history gives a tool call no stored row answers
UNANSWERED = "(no result was recorded for this call: the run ended before it came back)"


def history_from_turns(turns: Iterable[Mapping[str, Any]]) -> list[ModelMessage]:
    """The conversation stored as ``turns`` (rows of the ``turns`` table, oldest first, as
    :meth:`kernos.runtime.Store.turns` returns them), ready for ``session.history = ...``.

    Consecutive user and tool rows form one request, tool results first (they answer the
    response before them), then user text. Rows of an unknown role are skipped.
    """
    messages: list[ModelMessage] = []
    results: list[ModelRequestPart] = []
    prompts: list[ModelRequestPart] = []
    open_calls: dict[str, str] = {}  # id -> tool name, calls of the last response not answered

    def close_request() -> None:
        nonlocal results, prompts
        for call_id, name in open_calls.items():
            results.append(ToolReturnPart(name, UNANSWERED, tool_call_id=call_id))
        open_calls.clear()
        if results or prompts:
            messages.append(ModelRequest(parts=[*results, *prompts]))
        results, prompts = [], []

    for turn in turns:
        role = turn.get("role")
        if role == "user":
            prompts.append(UserPromptPart(_text(turn.get("text"))))
        elif role == "tool":
            for result in _items(turn.get("tool_results")):
                call_id = _text(result.get("id"))
                if call_id not in open_calls:
                    continue  # an answer to no call of the response before it
                name, text = open_calls.pop(call_id), _text(result.get("text"))
                results.append(ToolReturnPart(name, text, tool_call_id=call_id))
        elif role == "assistant":
            close_request()
            parts: list[ModelResponsePart] = []
            text = _text(turn.get("text"))
            if text:
                parts.append(TextPart(text))
            for call in _items(turn.get("tool_calls")):
                call_id, name = _text(call.get("id")), _text(call.get("name"))
                if not call_id or not name or call_id in open_calls:
                    continue
                parts.append(ToolCallPart(name, _args(call.get("args")), tool_call_id=call_id))
                open_calls[call_id] = name
            usage = RequestUsage(
                input_tokens=_count(turn.get("input_tokens")),
                output_tokens=_count(turn.get("output_tokens")),
            )
            messages.append(ModelResponse(parts=parts, usage=usage))
    close_request()
    return messages


def load_history(store: Store, session_id: str) -> list[ModelMessage]:
    """The stored conversation of ``session_id`` (empty when it has no turns)."""
    return history_from_turns(store.turns(session_id))


def _items(value: Any) -> list[Mapping[str, Any]]:
    """A row's ``tool_calls`` / ``tool_results``: a list of objects, or its JSON text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _args(value: Any) -> str | dict[str, Any] | None:
    if value is None or isinstance(value, str | dict):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
