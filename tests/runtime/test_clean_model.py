"""Model answers are cleaned of lone surrogates once, where they enter a session (pure rules)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from pydantic_ai.messages import ModelResponse, TextPart, ThinkingPart, ToolCallPart
from pydantic_ai.models.test import TestModel

from kernos.boundary import ToolContext, ToolSpec
from kernos.runtime import Config, Session, Store, resolve_model
from kernos.runtime._models._clean import CleanTextModel, clean_model, clean_response
from kernos.testing import FakeOpenAIServer, text, tool_call


def test_text_thinking_tool_names_and_arguments_are_cleaned() -> None:
    response = ModelResponse(
        parts=[
            TextPart("done \ud800 ok"),
            ThinkingPart("hm\udfff"),
            ToolCallPart("look\ud800", '{"q": "a\udc00"}', tool_call_id="c1"),
            ToolCallPart("look", {"q": ["\ud800"]}, tool_call_id="c2"),
        ]
    )
    cleaned = clean_response(response)
    text, thinking, call, dict_call = cleaned.parts
    assert isinstance(text, TextPart) and text.content == "done \ufffd ok"
    assert isinstance(thinking, ThinkingPart) and thinking.content == "hm\ufffd"
    assert isinstance(call, ToolCallPart)
    assert (call.tool_name, call.args) == ("look\ufffd", '{"q": "a\ufffd"}')
    assert call.tool_call_id == "c1"
    assert isinstance(dict_call, ToolCallPart) and dict_call.args == {"q": ["\ufffd"]}


def test_a_clean_answer_is_returned_as_it_is() -> None:
    response = ModelResponse(parts=[TextPart("fine \U0001f600"), ToolCallPart("t", '{"a": 1}')])
    assert clean_response(response) is response


def test_a_model_is_wrapped_once() -> None:
    model = TestModel()
    wrapped = clean_model(model)
    assert isinstance(wrapped, CleanTextModel) and wrapped.wrapped is model
    assert clean_model(wrapped) is wrapped


class _Echo(BaseModel):
    word: str


async def _echo(params: _Echo, ctx: ToolContext) -> str:
    return f"echo {params.word} \udcff"  # a tool may hand back surrogateescape-decoded bytes


async def test_a_session_cleans_the_answer_the_prompt_and_tool_results(
    openai_env: FakeOpenAIServer, tmp_path: Path
) -> None:
    store = Store(tmp_path / "kernos.db")
    session = Session(
        resolve_model("openai-chat:test", Config()),
        tools=[ToolSpec("echo", "Echo a word.", _Echo, _echo)],
        store=store,
    )
    openai_env.script(
        tool_call("echo", {"word": "hi \ud800"}),
        text("over \ud800 and out", when="echo hi"),
    )
    assert await session.prompt("say \udcff hi") == "over \ufffd and out"
    assert openai_env.tool_results() == ["echo hi \ufffd \ufffd"]
    assert openai_env.requests[0]["messages"][-1]["content"] == "say \ufffd hi"
    assert [t["text"] for t in store.turns(session.session_id)][-1] == "over \ufffd and out"
