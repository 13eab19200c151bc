"""One session loop for every model: the same scripted conversation through an OpenAI-compatible
model (``FakeOpenAIServer``) and through a non-OpenAI pydantic-ai model (a ``FunctionModel``,
driven through :class:`kernos.runtime._models._model_adapter.PydanticModelLean`) gives the same
session events, store rows and answer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from kernos.runtime import Config, Session, SessionEvent, Store, resolve_model
from kernos.runtime._models._model_adapter import PydanticModelLean, to_pydantic_messages
from kernos.runtime._session._lean import lean_model_for
from kernos.testing import FakeOpenAIServer, text, tool_call, tool_calls
from kernos.testing._wire import estimate_tokens
from tests.runtime._lookup import LOOKUP

#: the conversation: (text, [(tool, arguments), ...]) per answer
SCRIPT: list[tuple[str, list[tuple[str, Any]]]] = [
    ("", [("lookup", {"nokey": 1})]),  # a schema error: asked again
    ("", [("lookup", {"key": "a"}), ("lookup", {"key": "no"})]),  # parallel; one refused
    ("", []),  # an empty answer: asked again
    ("all done", []),
]


def _server_script(server: FakeOpenAIServer) -> None:
    replies = []
    for answer, calls in SCRIPT:
        if len(calls) == 1:
            replies.append(tool_call(*calls[0]))
        elif calls:
            replies.append(tool_calls(*calls))
        else:
            replies.append(text(answer))
    server.script(*replies)


def _sent_text(messages: list[ModelMessage], info: AgentInfo) -> str:
    """What the fake server counts as the request's text (kernos.testing._wire.prompt_tokens)."""
    parts: list[str] = [info.instructions or ""]
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart | SystemPromptPart | TextPart):
                parts.append(str(part.content))
            elif isinstance(part, ToolReturnPart):
                parts.append(part.model_response_str())
            elif isinstance(part, ToolCallPart):
                parts.append(part.args_as_json_str())
    return "".join(parts)


def function_model(name: str = "openai-chat:test") -> FunctionModel:
    """The script as a pydantic-ai ``FunctionModel``, answering with the fake server's ids and
    usage figures."""
    state = {"answer": 0, "counter": 0}

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert [t.name for t in info.function_tools] == ["lookup"]
        reply, calls = SCRIPT[state["answer"]]
        state["answer"] += 1
        state["counter"] += 1
        parts: list[TextPart | ToolCallPart] = [TextPart(reply)] if reply else []
        for tool, args in calls:
            state["counter"] += 1
            parts.append(ToolCallPart(tool, json.dumps(args), f"call_{state['counter']}"))
        said = reply + "".join(tool + json.dumps(args) for tool, args in calls)
        usage = RequestUsage(
            input_tokens=estimate_tokens(_sent_text(messages, info)),
            output_tokens=estimate_tokens(said),
        )
        return ModelResponse(parts=parts, usage=usage, provider_name="openai")

    return FunctionModel(answer, model_name=name.split(":", 1)[1])


def _observed(model: Model, tmp_path: Path, label: str) -> tuple[str, list[Any], list[Any]]:
    store = Store(tmp_path / f"{label}.db")
    events: list[SessionEvent] = []
    session = Session(
        model, "Be brief.", [LOOKUP], store=store, on_event=events.append, session_id="s_same"
    )
    final = asyncio.run(session.prompt("find"))
    turns = [
        {k: v for k, v in t.items() if k not in ("id", "created_at")} for t in store.turns("s_same")
    ]
    usage = [
        tuple(row)
        for row in store.query(
            "SELECT agent, model, provider, input_tokens, output_tokens, cached_tokens "
            "FROM usage WHERE session_id = ? ORDER BY id",
            ("s_same",),
        )
    ]
    shown: list[Any] = []
    for event in events:
        if event.kind == "usage":
            shown.append(
                [
                    (r.model_name, r.provider_name, r.usage.input_tokens, r.usage.output_tokens)
                    for r in event.data["responses"]
                ]
            )
        elif event.kind == "tool_result":
            shown.append((event.kind, event.data["name"], event.data["result"].text))
        else:
            shown.append((event.kind, json.dumps(event.data, default=str, sort_keys=True)))
    store.close()
    return final, turns + usage, shown


def test_an_openai_model_and_a_function_model_run_the_same_conversation(
    tmp_path: Path, openai_env: FakeOpenAIServer
) -> None:
    _server_script(openai_env)
    chat = _observed(resolve_model("openai-chat:test", Config()), tmp_path, "chat")
    openai_env.assert_all_consumed()
    function = _observed(function_model(), tmp_path, "function")
    assert chat[0] == function[0] == "all done"
    assert function[1] == chat[1]  # the store's turns and usage rows
    assert function[2] == chat[2]  # every session event, in order


def test_a_function_model_is_driven_through_the_adapter() -> None:
    assert isinstance(lean_model_for(function_model()), PydanticModelLean)


def test_wire_messages_become_one_request_per_run_of_user_tool_and_system_messages() -> None:
    messages = to_pydantic_messages(
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": ""},
            {"role": "system", "content": "again"},
        ]
    )
    kinds = [type(m) for m in messages]
    assert kinds == [ModelRequest, ModelResponse, ModelRequest, ModelResponse, ModelRequest]
    first, call, second, empty, last = messages
    assert isinstance(first, ModelRequest) and first.instructions == "sys"
    assert isinstance(call, ModelResponse) and call.parts == [ToolCallPart("t", "{}", "c1")]
    assert isinstance(second, ModelRequest)
    assert [(type(p).__name__, p.content) for p in second.parts] == [
        ("ToolReturnPart", "r"),
        ("UserPromptPart", "more"),
    ]
    assert second.parts[0].tool_name == "t"  # type: ignore[union-attr]
    assert isinstance(empty, ModelResponse) and empty.parts == []
    assert isinstance(last, ModelRequest) and last.instructions == "sys"
    assert isinstance(last.parts[0], SystemPromptPart)


def test_a_streamed_function_model_emits_its_text_as_deltas() -> None:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        for piece in ("all ", "done"):
            yield piece

    events: list[SessionEvent] = []
    model = FunctionModel(stream_function=stream, model_name="streamed")
    session = Session(model, "sys", [LOOKUP], stream=True, on_event=events.append)
    assert asyncio.run(session.prompt("go")) == "all done"
    assert [e.data["text"] for e in events if e.kind == "delta"] == ["all ", "done"]


def test_several_bad_calls_of_one_tool_in_one_answer_spend_one_retry(
    openai_env: FakeOpenAIServer,
) -> None:
    # pydantic-ai's count: LOOKUP allows 2 retries; three invalid calls in one answer use one
    openai_env.script(
        tool_calls(("lookup", {"nokey": 1}), ("lookup", {"nokey": 2}), ("lookup", {"nokey": 3})),
        text("done"),
    )
    session = Session(resolve_model("openai-chat:test", Config()), "sys", [LOOKUP])
    assert asyncio.run(session.prompt("go")) == "done"


USED = RequestUsage(input_tokens=1, output_tokens=1)  # FunctionModel's estimate cannot read them


def test_a_pydantic_ai_model_s_text_is_cleaned_once_where_it_enters() -> None:
    answers = iter(
        [
            ModelResponse(parts=[ToolCallPart("lookup", '{"key": "a\ud800"}', "c1")], usage=USED),
            ModelResponse(parts=[TextPart("done \ud800 ok")], usage=USED),
        ]
    )
    model = FunctionModel(lambda messages, info: next(answers), model_name="dirty")
    session = Session(model, "sys", [LOOKUP])
    assert asyncio.run(session.prompt("go")) == "done \ufffd ok"
    assert session.history[2].parts[0].content == "value of a\ufffd"


def test_a_model_s_own_profile_shapes_the_tool_schemas_it_is_sent() -> None:
    from pydantic_ai.profiles import ModelProfile
    from pydantic_ai.profiles.google import GoogleJsonSchemaTransformer

    seen: list[dict[str, Any]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.extend(t.parameters_json_schema for t in info.function_tools)
        return ModelResponse(parts=[TextPart("ok")])

    profile = ModelProfile(json_schema_transformer=GoogleJsonSchemaTransformer)
    model = FunctionModel(answer, model_name="gemini-like", profile=profile)
    assert asyncio.run(Session(model, "sys", [LOOKUP]).prompt("go")) == "ok"
    shaped = GoogleJsonSchemaTransformer(LOOKUP.schema(), strict=None).walk()
    assert seen == [shaped] and shaped != LOOKUP.schema()  # titles removed, as Gemini wants
