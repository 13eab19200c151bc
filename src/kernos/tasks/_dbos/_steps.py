"""Model requests and tool calls as DBOS steps of a child workflow."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dbos import DBOS, StepOptions
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models.wrapper import WrapperModel

from kernos.runtime import LeanModel, Reply, WrapperLean, response_reply, usage_responses
from kernos.tasks._steps import ToolRecord

if TYPE_CHECKING:
    pass


# -- model requests as steps ---------------------------------------------------------------------
class DurableModel(WrapperModel):
    """A child's model whose answers are DBOS steps inside a child workflow (plain answers
    outside one): the loop wraps the view of what it wraps in :class:`DurableLean` (see
    :func:`kernos.runtime._session._lean.lean_model_for`)."""

    def wrap_lean(self, inner: LeanModel) -> LeanModel:
        return DurableLean(inner)


def _reply_record(reply: Reply) -> str:
    """An answer as a step's record: a pydantic-ai response (the raw finish reason where
    pydantic-ai keeps it), the form the pydantic-ai engine of earlier kernos versions recorded
    too, so a run they began resumes here."""
    (response,) = usage_responses([reply])
    if reply.finish_reason:
        response.provider_details = {"finish_reason": reply.finish_reason}
    return ModelMessagesTypeAdapter.dump_json([response]).decode()


def _record_reply(raw: str) -> Reply:
    """A step's record (this version's or an earlier pydantic-ai engine's) as an answer; tool
    arguments as the model sent them, the finish reason the raw one the record keeps."""
    (response,) = ModelMessagesTypeAdapter.validate_json(raw)
    assert isinstance(response, ModelResponse)
    details = response.provider_details or {}
    return replace(response_reply(response), finish_reason=details.get("finish_reason"))


class DurableLean(WrapperLean):
    """A lean model whose answers are DBOS steps inside a child workflow (plain answers
    outside one): run once and recorded, the recorded answer on a replay."""

    async def answer(
        self,
        messages: list[dict[str, Any]],
        tools: str,
        on_delta: Callable[[str], None] | None,
    ) -> Reply:
        if DBOS.workflow_id is None:
            return await self.inner.answer(messages, tools, on_delta)

        async def model_request() -> str:
            return _reply_record(await self.inner.answer(messages, tools, on_delta))

        options: StepOptions = {"name": "model_request", "retries_allowed": False}
        return _record_reply(await DBOS.run_step_async(options, model_request))


async def tool_step(name: str, call: Callable[[], Coroutine[Any, Any, ToolRecord]]) -> ToolRecord:
    """One tool call as a DBOS step of the current child workflow (a plain call outside one):
    run once and recorded, its recorded result on a replay."""
    if DBOS.workflow_id is None:
        return await call()
    options: StepOptions = {"name": f"tool:{name}", "retries_allowed": False}
    return await DBOS.run_step_async(options, call)
