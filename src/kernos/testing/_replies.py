"""Scripted replies and the rule that picks one for a request.

Pure functions over the request JSON: no sockets, no clock, so the matching rule is testable on its
own and the server stays a thin shell around it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

When: TypeAlias = str | Callable[[dict[str, Any]], bool] | None
"""``None`` matches anything; a ``str`` must occur in the latest message; a callable decides."""

ToolArgs: TypeAlias = Mapping[str, Any] | str
"""A mapping is JSON-encoded; a string is sent verbatim, so tests can send malformed JSON."""

_USER_ROLES = frozenset({"user", "tool", "function"})
_SYSTEM_ROLES = frozenset({"system", "developer"})


@dataclass(frozen=True)
class Reply:
    """One scripted assistant answer, and the requests it may answer.

    Build replies with :func:`text`, :func:`tool_call` and :func:`tool_calls`; the fields are
    public so a test can inspect what is left in a script.

    Args:
        content: the assistant text, or ``None`` for a tool-call-only answer.
        calls: ``(name, arguments)`` pairs; ``arguments`` is the exact string put on the wire.
        when: which requests this reply may answer (see :data:`When`).
        when_system: match a ``str`` ``when`` against the system message instead of the latest one,
            which is how a test tells a child agent's requests from its parent's.
        repeat: answer every matching request and never be consumed.
        hold: an event the server waits for (up to 60 s) before sending this answer, so a test can
            keep one conversation (a child agent, say) in flight while others go on.
        status: the HTTP status; anything but 200 answers with an OpenAI-style error body whose
            message is ``content`` (``{api_key}`` in it becomes the key the client sent).
        retry_after: for an error, the ``Retry-After`` seconds to send; a 5xx that has one is
            worth retrying (without, a 5xx says ``x-should-retry: false``: a script gap will not
            heal on retry).
        finish_reason: the ``finish_reason`` sent instead of the usual one (``"length"``: the
            answer was cut off at the output token limit).

    Raises:
        ValueError: the reply has neither content nor tool calls.
    """

    content: str | None = None
    calls: tuple[tuple[str, str], ...] = ()
    when: When = None
    when_system: bool = False
    repeat: bool = False
    hold: threading.Event | None = None
    status: int = 200
    retry_after: int | None = None
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        if self.content is None and not self.calls:
            raise ValueError(
                "a Reply needs content or at least one tool call; use text('') for empty"
            )

    def matches(self, request: Mapping[str, Any]) -> bool:
        """Whether this reply may answer ``request`` (a chat completions request body)."""
        if self.when is None:
            return True
        if isinstance(self.when, str):
            haystack = system_text(request) if self.when_system else latest_message(request)
            return self.when in haystack
        return bool(self.when(dict(request)))

    def describe(self) -> str:
        """A one-line description, used when a test asserts the script was used up."""
        if self.calls:
            shown = ", ".join(f"{name}({_clip(args, 60)})" for name, args in self.calls)
            what = f"tool call {shown}"
        elif self.status != 200:
            what = f"HTTP {self.status} {_clip(self.content or '', 60)!r}"
        else:
            what = f"text {_clip(self.content or '', 60)!r}"
        if isinstance(self.when, str):
            where = "system message" if self.when_system else "latest message"
            what += f" when {self.when!r} in {where}"
        elif self.when is not None:
            what += f" when {getattr(self.when, '__name__', 'callable')}(request)"
        return what + (" (repeat)" if self.repeat else "")


def text(
    content: str,
    *,
    when: When = None,
    when_system: bool = False,
    repeat: bool = False,
    hold: threading.Event | None = None,
) -> Reply:
    """An assistant text answer; ends the model's turn with ``finish_reason="stop"``."""
    return Reply(content=content, when=when, when_system=when_system, repeat=repeat, hold=hold)


def error(
    status: int,
    message: str,
    *,
    when: When = None,
    when_system: bool = False,
    repeat: bool = False,
    retry_after: int | None = None,
) -> Reply:
    """An HTTP error answer (``401``, ``429``, ``500``...) with an OpenAI-style error body.

    ``{api_key}`` in ``message`` is replaced by the key the client sent, the way real providers
    echo a wrong key in a 401 (``Incorrect API key provided: gsk_...``). ``retry_after`` sends a
    ``Retry-After`` header (seconds) and makes a 5xx retryable.

    Raises:
        ValueError: ``status`` is not an error status (400-599).
    """
    if not 400 <= status <= 599:
        raise ValueError(f"error() takes an HTTP error status (400-599), not {status}")
    return Reply(
        content=message,
        when=when,
        when_system=when_system,
        repeat=repeat,
        status=status,
        retry_after=retry_after,
    )


def tool_call(
    name: str,
    args: ToolArgs | None = None,
    *,
    when: When = None,
    when_system: bool = False,
    repeat: bool = False,
    hold: threading.Event | None = None,
    finish_reason: str | None = None,
) -> Reply:
    """An assistant message with one tool call.

    Args:
        name: the tool the model calls.
        args: a mapping (JSON-encoded) or a raw string sent verbatim — malformed JSON included, so
            the caller's retry path can be tested. ``None`` sends ``{}``.
        finish_reason: sent instead of ``"tool_calls"``: ``"length"`` says the provider cut the
            answer off at its output token limit (send the arguments cut too, as text).
    """
    return tool_calls(
        (name, {} if args is None else args),
        when=when,
        when_system=when_system,
        repeat=repeat,
        hold=hold,
        finish_reason=finish_reason,
    )


def tool_calls(
    *calls: tuple[str, ToolArgs],
    when: When = None,
    when_system: bool = False,
    repeat: bool = False,
    hold: threading.Event | None = None,
    finish_reason: str | None = None,
) -> Reply:
    """An assistant message with several tool calls at once (a parallel batch).

    Raises:
        ValueError: no calls were given.
    """
    if not calls:
        raise ValueError("tool_calls() needs at least one (name, args) pair")
    encoded = tuple((name, _encode_args(args)) for name, args in calls)
    return Reply(
        calls=encoded,
        when=when,
        when_system=when_system,
        repeat=repeat,
        hold=hold,
        finish_reason=finish_reason,
    )


def latest_message(request: Mapping[str, Any]) -> str:
    """The text a ``str`` ``when`` is matched against: what arrived since the model last spoke.

    That is the user and tool messages after the last assistant message, joined by newlines —
    normally one message; several when a batch of tool results comes back at once.
    """
    messages = _messages(request)
    tail: list[Mapping[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") == "assistant":
            break
        tail.append(message)
    texts = [content_text(m) for m in reversed(tail) if m.get("role") in _USER_ROLES]
    if not texts:
        # no user/tool message after the last assistant turn: fall back to the last one anywhere
        texts = [content_text(m) for m in messages if m.get("role") in _USER_ROLES][-1:]
    return "\n".join(texts)


def system_text(request: Mapping[str, Any]) -> str:
    """Every system (or developer) message of ``request``, joined by newlines."""
    return "\n".join(content_text(m) for m in _messages(request) if m.get("role") in _SYSTEM_ROLES)


def content_text(message: Mapping[str, Any]) -> str:
    """A message's content as text, whether the client sent a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _messages(request: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    messages = request.get("messages")
    if not isinstance(messages, list):
        return []
    return [m for m in messages if isinstance(m, Mapping)]


def _encode_args(args: ToolArgs) -> str:
    if isinstance(args, str):
        return args
    return json.dumps(dict(args), ensure_ascii=False)


def _clip(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"
