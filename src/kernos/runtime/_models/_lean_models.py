"""The models the lean loop (:class:`kernos.runtime._session._lean.LeanLoop`) talks to: the
:class:`LeanModel` interface, its adapters (an OpenAI-compatible chat, a cassette replayed or
recorded) and :func:`lean_model_for`, which picks one for a model."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kernos.boundary import ToolSpec, clean_json_text, clean_text
from kernos.runtime._models._cassette import RecordingModel, ReplayModel
from kernos.runtime._models._chat import OpenAIChat
from kernos.runtime._models._lean_wire import (
    ATTEMPTS,
    Reply,
    dumps,
    request_body,
    shared_endpoint,
)
from kernos.runtime._models._model_adapter import PydanticModelLean, plain_tool_wire


def latest_dict_text(messages: Sequence[dict[str, Any]]) -> str:
    """What :func:`kernos.runtime._models._cassette.latest_message_text` reads, from wire dicts: the
    newest run of user/tool messages that has text."""
    texts: list[str] = []
    for message in reversed(messages):
        role = message.get("role")
        if role == "assistant":
            if texts:
                break
            continue
        if role in ("user", "tool"):
            content = message.get("content")
            texts.append(content if isinstance(content, str) else str(content))
    return "\n".join(reversed(texts))


class LeanModel(Protocol):
    """What the lean loop asks of a model: one answer to the wire-shaped ``messages``, and a
    tool's wire form (``tool_wire``, computed once per tool set)."""

    def tool_wire(self, spec: ToolSpec[Any]) -> dict[str, Any]: ...

    async def answer(
        self,
        messages: list[dict[str, Any]],
        tools: str,
        on_delta: Callable[[str], None] | None,
    ) -> Reply: ...


@dataclass
class ChatLean:
    """An ``openai-chat`` model on its endpoint's pooled client; tool schemas are shaped by the
    model's profile the way pydantic-ai shapes them (strict where the schema allows)."""

    endpoint: Any
    name: str
    profile: Any = None
    retries: int = ATTEMPTS - 1
    timeout: float | None = None

    def tool_wire(self, spec: ToolSpec[Any]) -> dict[str, Any]:
        wire = plain_tool_wire(spec)
        transformer = (self.profile or {}).get("json_schema_transformer")
        if transformer is None:
            return wire
        shaped = transformer(wire["function"]["parameters"], strict=None)
        wire["function"]["parameters"] = shaped.walk()
        if shaped.is_strict_compatible and self.profile.get(
            "openai_supports_strict_tool_definition", True
        ):
            wire["function"]["strict"] = True
        return wire

    async def answer(
        self,
        messages: list[dict[str, Any]],
        tools: str,
        on_delta: Callable[[str], None] | None,
    ) -> Reply:
        body = request_body(self.name, messages, tools, on_delta is not None)
        return await self.endpoint.complete(  # type: ignore[no-any-return]
            self.name, body, on_delta=on_delta, attempts=self.retries + 1, timeout=self.timeout
        )


@dataclass
class ReplayLean:
    """A cassette (the same :class:`ReplayModel`, so parents and children share its turns)."""

    cassette: ReplayModel

    def tool_wire(self, spec: ToolSpec[Any]) -> dict[str, Any]:
        return plain_tool_wire(spec)

    async def answer(
        self,
        messages: list[dict[str, Any]],
        tools: str,
        on_delta: Callable[[str], None] | None,
    ) -> Reply:
        turn, index = self.cassette.take_turn(latest_dict_text(messages))
        reply = Reply(text=clean_text(str(turn.get("text") or "")), model_name="replay")
        for n, call in enumerate(turn.get("tool_calls") or []):
            args = call.get("args", {})
            reply.calls.append(
                (
                    clean_text(str(call.get("id") or f"replay_{index}_{n}")),
                    clean_text(str(call["name"])),
                    clean_json_text(args if isinstance(args, str) else dumps(args)),
                )
            )
        if on_delta is not None and reply.text:
            on_delta(reply.text)
        return reply


@dataclass
class WrapperLean:
    """A lean model around another that passes every call through: a wrapper (recording, a
    durable step) overrides only what it adds, as pydantic-ai's ``WrapperModel`` does."""

    inner: LeanModel

    def tool_wire(self, spec: ToolSpec[Any]) -> dict[str, Any]:
        return self.inner.tool_wire(spec)

    async def answer(
        self,
        messages: list[dict[str, Any]],
        tools: str,
        on_delta: Callable[[str], None] | None,
    ) -> Reply:
        return await self.inner.answer(messages, tools, on_delta)


@dataclass
class RecordingLean(WrapperLean):
    """A lean model whose answers are written to the recording's cassette."""

    recording: RecordingModel

    async def answer(
        self,
        messages: list[dict[str, Any]],
        tools: str,
        on_delta: Callable[[str], None] | None,
    ) -> Reply:
        reply = await self.inner.answer(messages, tools, on_delta)
        turn: dict[str, Any] = {"match": latest_dict_text(messages)}
        if reply.text:
            turn["text"] = reply.text
        if reply.calls:
            turn["tool_calls"] = [
                {"name": name, "args": args, "id": call_id} for call_id, name, args in reply.calls
            ]
        self.recording.record_turn(turn)
        return reply


def lean_model_for(model: Any) -> LeanModel:
    """The loop's view of ``model``: kernos's own layers (recording, text cleaning, a durable
    wrapper's ``wrap_lean``) become lean wrappers, ``openai-chat`` models and cassettes their own
    adapters, and every other model is asked through pydantic-ai's model interface."""
    from pydantic_ai.models.wrapper import WrapperModel

    from kernos.runtime._models._clean import CleanTextModel

    if isinstance(model, RecordingModel):
        return RecordingLean(lean_model_for(model.wrapped), model)
    if isinstance(model, CleanTextModel):  # every adapter cleans the model's text itself
        return lean_model_for(model.wrapped)
    if isinstance(model, ReplayModel):
        return ReplayLean(model)
    if isinstance(model, OpenAIChat):  # the pooled wire: no pydantic-ai model is made
        endpoint = shared_endpoint(model.endpoint_url, model.api_key)
        return ChatLean(
            endpoint, model.model_name, model.lean_profile(), model.retries, model.timeout
        )
    # a program's own OpenAIChatModel (its module is loaded if one exists); a subclass may change
    # the request, so it is asked through its own request()
    openai_models = sys.modules.get("pydantic_ai.models.openai")
    if openai_models is not None and type(model) is openai_models.OpenAIChatModel:
        client = model.client
        endpoint = shared_endpoint(str(client.base_url), str(client.api_key))
        return ChatLean(endpoint, model.model_name, model.profile)
    if isinstance(model, WrapperModel):
        # a wrapper that knows the loop says how to wrap the view of what it wraps
        # (``wrap_lean(model, inner)``; the DBOS engine's durable model makes each answer a
        # step); any other wrapper must see every request, so it is asked itself. Looked up on
        # the type: WrapperModel forwards unknown attributes to the model it wraps.
        wrap_lean = getattr(type(model), "wrap_lean", None)
        if wrap_lean is not None:
            return wrap_lean(model, lean_model_for(model.wrapped))  # type: ignore[no-any-return]
    # any other provider's model, through pydantic-ai's model interface
    # (runtime/_models/_model_adapter.py)
    return PydanticModelLean(model)
