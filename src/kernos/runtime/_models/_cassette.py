"""Cassettes: model turns recorded once and replayed offline.

A cassette is JSON::

    {"version": 1,
     "turns": [{"match": "optional substring of the latest request message",
                "text": "assistant text",
                "tool_calls": [{"name": "task", "args": {...} | "raw json text", "id": "c1"}]}]}

Replay serves, for each request, the first unused turn whose ``match`` occurs in the request's
latest user/tool message (a turn without ``match`` fits any request), so one cassette can drive a
parent and its children; a turn with ``"repeat": true`` is never used up (for messages whose count
depends on timing, such as batched completion notices). A request no turn fits fails loudly, naming
the request. Recording keeps
message text and tool calls only: headers and keys are never seen, and every secret value the
scrubber knows (and every secret shape) is removed from what is written.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from kernos.errors import CassetteError as CassetteError
from kernos.runtime._models._clean import clean_response
from kernos.runtime._rules._foreign import match_text
from kernos.runtime._secrets import redact, scrub_text


def latest_message_text(messages: Sequence[ModelMessage]) -> str:
    """The text of the newest user prompt, tool result or retry prompt in a request."""
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        texts: list[str] = []
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                content = part.content
                texts.append(content if isinstance(content, str) else str(content))
            elif isinstance(part, ToolReturnPart):
                texts.append(part.model_response_str())
            elif isinstance(part, RetryPromptPart):
                texts.append(part.model_response())
        if texts:
            return "\n".join(texts)
    return ""


def _load_turns(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CassetteError(f"cassette {path} does not exist; check the replay: path") from None
    except json.JSONDecodeError as exc:
        raise CassetteError(f"cassette {path} is not valid JSON: {exc}") from None
    turns = data.get("turns") if isinstance(data, dict) else None
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise CassetteError(f"cassette {path} must be an object with a list of turn objects")
    return turns


def _response_from_turn(turn: dict[str, Any], index: int) -> ModelResponse:
    parts: list[TextPart | ToolCallPart] = []
    if turn.get("text"):
        parts.append(TextPart(str(turn["text"])))
    for n, call in enumerate(turn.get("tool_calls") or []):
        args = call.get("args", {})
        parts.append(
            ToolCallPart(
                tool_name=str(call["name"]),
                args=args if isinstance(args, str | dict) else json.dumps(args),
                tool_call_id=str(call.get("id") or f"replay_{index}_{n}"),
            )
        )
    if not parts:
        parts.append(TextPart(""))
    return ModelResponse(parts=parts, usage=RequestUsage(), model_name="replay")


class ReplayModel(FunctionModel):
    """A pydantic-ai model that answers from a cassette file (``replay:PATH``)."""

    def __init__(self, path: Path | str) -> None:
        self.cassette_path = Path(path)
        self._turns = _load_turns(self.cassette_path)
        self._used = [False] * len(self._turns)
        self._lock = threading.Lock()
        super().__init__(self._answer, model_name=f"replay:{self.cassette_path.name}")

    @property
    def remaining(self) -> int:
        """Turns not used yet (repeating turns always count)."""
        return self._used.count(False)

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return _response_from_turn(*self.take_turn(latest_message_text(messages)))

    def take_turn(self, latest: str) -> tuple[dict[str, Any], int]:
        """The first unused turn that fits a request whose latest message is ``latest`` (used up
        unless it repeats), and its index; the loop and a program's own agent replay through here.

        Raises:
            CassetteError: no turn fits.
        """
        with self._lock:
            for index, turn in enumerate(self._turns):
                if self._used[index]:
                    continue
                match = turn.get("match")
                if match is None or str(match) in latest:
                    self._used[index] = not turn.get("repeat", False)
                    return turn, index
        shown = latest if len(latest) <= 200 else latest[:197] + "..."
        raise CassetteError(
            f"cassette {self.cassette_path} has no turn left for this request "
            f"(latest message: {shown!r}); record it again with --record"
        )


def finish_turn(turn: dict[str, Any]) -> dict[str, Any]:
    """A recorded turn as written: its ``match`` (a delimited tool result's own text, without its
    random nonce) scrubbed, then cut (half a token is no longer a value the scrubber
    recognises), and every secret redacted."""
    turn["match"] = scrub_text(match_text(turn["match"]))[:120]
    return redact(turn)  # type: ignore[no-any-return]


def _turn_from_response(
    messages: Sequence[ModelMessage], response: ModelResponse
) -> dict[str, Any]:
    turn: dict[str, Any] = {"match": latest_message_text(messages)}
    text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
    if text:
        turn["text"] = text
    calls = [
        {"name": p.tool_name, "args": p.args, "id": p.tool_call_id}
        for p in response.parts
        if isinstance(p, ToolCallPart)
    ]
    if calls:
        turn["tool_calls"] = calls
    return finish_turn(turn)


_RECORD_LOCK = threading.Lock()


class RecordingModel(WrapperModel):
    """Wraps a real model and writes every turn it answers to a cassette (``--record PATH``)."""

    def __init__(
        self, wrapped: Model, path: Path | str, turns: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(wrapped)
        self.cassette_path = Path(path)
        # several models of one run (parent, children) may share one cassette
        self.turns: list[dict[str, Any]] = turns if turns is not None else []
        self._lock = _RECORD_LOCK

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        self._record(messages, response)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncIterator[StreamedResponse]:
        async with self.wrapped.request_stream(
            messages, model_settings, model_request_parameters, run_context
        ) as stream:
            yield stream
        # a streamed answer passes CleanTextModel by: clean what is written, as for request()
        self._record(messages, clean_response(stream.get()))

    def _record(self, messages: Sequence[ModelMessage], response: ModelResponse) -> None:
        self._write(_turn_from_response(messages, response))

    def record_turn(self, turn: dict[str, Any]) -> None:
        """Record a turn the loop answered: ``{"match": latest message text, "text",
        "tool_calls"}`` (scrubbed and cut here, as for a pydantic-ai request)."""
        self._write(finish_turn(turn))

    def _write(self, turn: dict[str, Any]) -> None:
        with self._lock:
            self.turns.append(turn)
            write_cassette(self.cassette_path, self.turns)


def write_cassette(path: Path, turns: list[dict[str, Any]]) -> None:
    """Write a cassette atomically (a crash never leaves half a cassette); every secret the
    scrubber knows is removed from what is written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"version": 1, "turns": redact(turns)}, ensure_ascii=False, indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
