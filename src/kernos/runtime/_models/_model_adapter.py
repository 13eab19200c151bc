"""Any pydantic-ai :class:`~pydantic_ai.models.Model` as a lean model (:class:`PydanticModelLean`).

The session loop (:class:`kernos.runtime._session._lean.LeanLoop`) speaks the Chat Completions
wire's plain dicts; a model of another provider (Anthropic, Gemini, Bedrock, Groq, a
``FunctionModel``, …) is asked through pydantic-ai's public model interface: the wire messages
become pydantic-ai messages (the system message the request's ``instructions``), the tools
``ToolDefinition`` s, and ``model.request`` (``request_stream`` when the session streams and the
model can) answers. The model shapes the tool schemas with its own profile, as under pydantic-ai's
``Agent`` (``Model.prepare_request`` applies its ``json_schema_transformer``). The answer is cleaned
once here (:func:`kernos.runtime._models._clean.clean_response`) and comes back as a :class:`Reply`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    SystemPromptPart,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.tools import ToolDefinition

from kernos.boundary import ToolSpec, clean_text
from kernos.runtime._models._chat import inner_layer
from kernos.runtime._models._clean import clean_response
from kernos.runtime._models._lean_wire import Reply


def plain_tool_wire(spec: ToolSpec[Any]) -> dict[str, Any]:
    """A tool's Chat Completions form, its schema as the tool declares it."""
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.schema(),
        },
    }


@dataclass
class PydanticModelLean:
    """A pydantic-ai model (any provider) answering the lean loop's requests."""

    model: Model
    #: the tools text last seen and its tool definitions (parsed once per tool set)
    _tools_text: str | None = field(default=None, repr=False)
    _params: ModelRequestParameters = field(default_factory=ModelRequestParameters, repr=False)

    def tool_wire(self, spec: ToolSpec[Any]) -> dict[str, Any]:
        return plain_tool_wire(spec)  # the model's profile shapes it in prepare_request

    def _parameters(self, tools: str) -> ModelRequestParameters:
        if tools != self._tools_text:
            self._params = ModelRequestParameters(function_tools=tool_definitions(tools))
            self._tools_text = tools
        return self._params

    async def answer(
        self,
        messages: list[dict[str, Any]],
        tools: str,
        on_delta: Callable[[str], None] | None,
    ) -> Reply:
        history = to_pydantic_messages(messages)
        params = self._parameters(tools)
        if on_delta is not None and streams(self.model):
            async with self.model.request_stream(history, None, params) as stream:
                async for event in stream:
                    if piece := text_delta(event):
                        on_delta(clean_text(piece))
            response = stream.get()
        else:
            response = await self.model.request(history, None, params)
        return response_reply(clean_response(response))


def tool_definitions(tools: str) -> list[ToolDefinition]:
    """The tools text of a request (:func:`kernos.runtime._models._lean_wire.tools_fragment`) as
    pydantic-ai tool definitions."""
    if not tools:
        return []
    wires = json.loads("{" + tools.lstrip(",") + "}")["tools"]
    return [
        ToolDefinition(
            name=wire["function"]["name"],
            description=wire["function"].get("description"),
            parameters_json_schema=wire["function"]["parameters"],
        )
        for wire in wires
    ]


def to_pydantic_messages(messages: Sequence[dict[str, Any]]) -> list[ModelMessage]:
    """The wire messages of one request as pydantic-ai messages: a leading system message is
    every request's ``instructions`` (as pydantic-ai's ``Agent`` sends them), a later one a
    system prompt part; consecutive user, tool and system messages are one request."""
    instructions: str | None = None
    if messages and messages[0].get("role") == "system":
        instructions = str(messages[0].get("content") or "") or None
        messages = messages[1:]
    out: list[ModelMessage] = []
    parts: list[ModelRequestPart] = []
    names: dict[str, str] = {}

    def flush() -> None:
        if parts:
            out.append(ModelRequest(parts=list(parts), instructions=instructions))
            parts.clear()

    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "assistant":
            flush()
            response: list[TextPart | ToolCallPart] = []
            if content:
                response.append(TextPart(str(content)))
            for call in message.get("tool_calls") or ():
                function = call["function"]
                names[call["id"]] = function["name"]
                response.append(ToolCallPart(function["name"], function["arguments"], call["id"]))
            out.append(ModelResponse(parts=response))
        elif role == "user":
            parts.append(UserPromptPart(str(content or "")))
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            parts.append(ToolReturnPart(names.get(call_id, ""), str(content or ""), call_id))
        elif role == "system":
            parts.append(SystemPromptPart(str(content or "")))
    flush()
    return out


def response_reply(response: ModelResponse) -> Reply:
    """A pydantic-ai answer as the lean loop's :class:`Reply` (arguments as the model sent them)."""
    calls = [
        (p.tool_call_id, p.tool_name, p.args if isinstance(p.args, str) else p.args_as_json_str())
        for p in response.parts
        if isinstance(p, ToolCallPart)
    ]
    usage = response.usage
    return Reply(
        text="".join(p.content for p in response.parts if isinstance(p, TextPart)),
        calls=calls,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cache_read_tokens,
        model_name=response.model_name,
        finish_reason=response.finish_reason,
        provider_name=response.provider_name,
    )


def streams(model: Model) -> bool:
    """Whether ``model`` can answer a streamed request (a ``FunctionModel`` without a stream
    function cannot: it answers whole)."""
    layer: Model | None = model
    while layer is not None:
        if isinstance(layer, FunctionModel) and layer.stream_function is None:
            return False
        layer = inner_layer(layer)
    return True


def text_delta(event: Any) -> str:
    """The text a streamed event adds ("" for any other event)."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta or ""
    return ""
