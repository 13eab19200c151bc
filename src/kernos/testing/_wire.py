"""Chat Completions wire shapes: a whole ``chat.completion``, or its stream of chunks.

Kept apart from the server so the shapes are plain data a test can compare, and so the streamed
and non-streamed answers are built from the same parts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from kernos.testing._replies import Reply, content_text

MODEL_ID = "kernos-fake"
"""The one model ``GET /v1/models`` lists; requests may name any model and get it echoed back."""

_PIECES = 3


class Ids(TypedDict):
    """What the server assigns an answer: its id, one id per tool call, its creation time."""

    completion_id: str
    call_ids: Sequence[str]
    created: int


def estimate_tokens(text: str) -> int:
    """Roughly four characters a token; never zero, so usage totals are visibly non-empty."""
    return max(1, len(text) // 4)


def prompt_tokens(request: Mapping[str, Any]) -> int:
    """A rough token count of everything the client sent in ``messages``."""
    messages = request.get("messages")
    parts: list[str] = []
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, Mapping):
                continue
            parts.append(content_text(message))
            for call in message.get("tool_calls") or ():
                if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
                    parts.append(str(call["function"].get("arguments", "")))
    return estimate_tokens("".join(parts))


def usage(reply: Reply, request: Mapping[str, Any]) -> dict[str, int]:
    """The ``usage`` object for answering ``request`` with ``reply``."""
    answer = (reply.content or "") + "".join(name + args for name, args in reply.calls)
    prompt, completion = prompt_tokens(request), estimate_tokens(answer)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def finish_reason(reply: Reply) -> str:
    if reply.finish_reason:
        return reply.finish_reason
    return "tool_calls" if reply.calls else "stop"


def completion(
    reply: Reply,
    request: Mapping[str, Any],
    *,
    completion_id: str,
    call_ids: Sequence[str],
    created: int,
) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` answering ``request`` with ``reply``."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, (name, args) in zip(call_ids, reply.calls, strict=True)
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": _model(request),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(reply),
                "logprobs": None,
            }
        ],
        "usage": usage(reply, request),
    }


def chunks(
    reply: Reply,
    request: Mapping[str, Any],
    *,
    completion_id: str,
    call_ids: Sequence[str],
    created: int,
) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed answer, in order, without ``[DONE]``.

    Text arrives in a few deltas; each tool call opens with its index, id and name, and its
    arguments follow split across deltas — the shapes a client's stream accumulator must join.
    A final usage chunk (empty ``choices``) is added when ``stream_options.include_usage`` is set.
    """
    options = request.get("stream_options")
    include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
    model = _model(request)

    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}],
        }
        if include_usage:
            body["usage"] = None
        return body

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": piece}) for piece in split(reply.content or "")]
    for index, (call_id, (name, args)) in enumerate(zip(call_ids, reply.calls, strict=True)):
        opening = {"index": index, "id": call_id, "type": "function"}
        out.append(
            chunk({"tool_calls": [{**opening, "function": {"name": name, "arguments": ""}}]})
        )
        out += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in split(args)
        ]
    out.append(chunk({}, finish_reason(reply)))
    if include_usage:
        out.append(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage(reply, request),
            }
        )
    return out


def split(value: str, pieces: int = _PIECES) -> list[str]:
    """``value`` in up to ``pieces`` consecutive non-empty parts (none for an empty string)."""
    if not value:
        return []
    size = -(-len(value) // pieces)
    return [value[i : i + size] for i in range(0, len(value), size)]


def models() -> dict[str, Any]:
    """The ``GET /v1/models`` answer."""
    return {
        "object": "list",
        "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "kernos"}],
    }


def error(message: str, kind: str, code: str) -> dict[str, Any]:
    """An OpenAI-style error body, so SDKs surface ``message`` in their exception text."""
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}


def _model(request: Mapping[str, Any]) -> str:
    model = request.get("model")
    return model if isinstance(model, str) and model else MODEL_ID
