"""Where a model's text enters kernos: every answer is cleaned of unencodable characters once.

A lone UTF-16 surrogate in a model's text (valid JSON: ``"done \\ud800 ok"``) would otherwise fail
every UTF-8 writer after it: stdout, SQLite, the log, a cassette, the next request to the provider.
:class:`CleanTextModel` wraps a model so that text parts, thinking, tool names and tool-call
argument text come out with U+FFFD in its place (valid text stays byte-identical); a lone
surrogate escaped inside argument JSON (``"\\\\ud800"``) becomes ``\\\\ufffd``
(:func:`kernos.boundary.clean_json_text`), so the arguments sent back in the history are clean too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic_ai.messages import (
    BaseToolCallPart,
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ThinkingPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from kernos.boundary import clean_json_text, clean_text, clean_value
from kernos.runtime._models._chat import inner_layer

#: set in a response's ``provider_details`` by :func:`cut_off_calls` when the provider cut it off
#: at its output limit (``finish_reason`` ``length``) in a tool call; the toolset reads it
#: (:class:`kernos.runtime._session._toolset.KernosToolset`)
CUT_OFF = "kernos_cut_off"


def clean_part(part: ModelResponsePart) -> ModelResponsePart:
    """One response part with its model-written text cleaned; the same object when already clean."""
    changes: dict[str, Any] = {}
    if isinstance(part, TextPart | ThinkingPart):
        if (content := clean_text(part.content)) is not part.content:
            changes["content"] = content
    elif isinstance(part, BaseToolCallPart):
        if (name := clean_text(part.tool_name)) is not part.tool_name:
            changes["tool_name"] = name
        if (call_id := clean_text(part.tool_call_id)) is not part.tool_call_id:
            changes["tool_call_id"] = call_id
        if isinstance(part.args, str):
            if (args := clean_json_text(part.args)) is not part.args:
                changes["args"] = args
        elif isinstance(part.args, dict):
            changes["args"] = clean_value(part.args)
    return dataclasses.replace(part, **changes) if changes else part


def clean_response(response: ModelResponse) -> ModelResponse:
    """``response`` with every part cleaned (the same object when nothing needed cleaning)."""
    parts = [clean_part(part) for part in response.parts]
    if all(new is old for new, old in zip(parts, response.parts, strict=True)):
        return response
    return dataclasses.replace(response, parts=parts)


class CleanTextModel(WrapperModel):
    """Wraps a model so that every answer it gives is cleaned (see the module docstring).

    Only :meth:`request` is cleaned: a session runs its agent step by step and never streams.
    """

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        return clean_response(cut_off_calls(response))


def cut_off_calls(response: ModelResponse) -> ModelResponse:
    """A response the provider cut off at its output limit in a tool call, handed to the tools:
    its calls reach :class:`kernos.runtime._session._toolset.KernosToolset`, which answers unusable
    arguments with ``truncated_call`` (pydantic-ai would end the run with ``IncompleteToolCall``).
    The cut is kept in ``provider_details``."""
    if response.finish_reason != "length" or not any(
        isinstance(part, BaseToolCallPart) for part in response.parts
    ):
        return response
    details = {**(response.provider_details or {}), CUT_OFF: True}
    return dataclasses.replace(response, finish_reason="tool_call", provider_details=details)


def clean_model(model: Model) -> Model:
    """``model`` wrapped in :class:`CleanTextModel`, unless some layer of it already is one."""
    layer: Model | None = model
    while layer is not None:
        if isinstance(layer, CleanTextModel):
            return model
        layer = inner_layer(layer)
    return CleanTextModel(model)
