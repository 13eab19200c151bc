"""Stored turns back into a conversation (``history_from_turns``): pure rules on plain rows, and a
round-trip property against what a real :class:`Session` records in a real store."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from kernos.boundary import ToolSpec
from kernos.runtime import Session, Store, history_from_turns
from kernos.runtime._session._history import UNANSWERED


def view(history: list[ModelMessage]) -> list[tuple[Any, ...]]:
    """What a provider is sent of a history: user text, tool results by call id, assistant text
    and tool calls with ids and arguments (timestamps, usage details and part classes aside)."""
    out: list[tuple[Any, ...]] = []
    for message in history:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    out.append(("user", part.content))
                elif isinstance(part, ToolReturnPart):
                    out.append(("tool", part.tool_call_id, part.model_response_str()))
        elif isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = [
                (p.tool_call_id, p.tool_name, p.args_as_dict())
                for p in message.parts
                if isinstance(p, ToolCallPart)
            ]
            out.append(("assistant", text, calls))
    return out


def row(role: str, text: str = "", calls: Any = (), results: Any = (), **tokens: int) -> Any:
    return {
        "role": role,
        "text": text,
        "tool_calls": list(calls),
        "tool_results": list(results),
        "input_tokens": tokens.get("inp", 0),
        "output_tokens": tokens.get("out", 0),
    }


# -- the pure rules ------------------------------------------------------------------------------


def test_user_assistant_tool_calls_and_results_come_back_in_order() -> None:
    turns = [
        row("user", "look it up"),
        row(
            "assistant",
            "checking",
            [{"id": "c1", "name": "lookup", "args": '{"q": "x"}'}],
            inp=12,
            out=3,
        ),
        row("tool", results=[{"id": "c1", "name": "lookup", "text": "x found"}]),
        row("assistant", "x is found", inp=20, out=4),
    ]
    history = history_from_turns(turns)
    assert view(history) == [
        ("user", "look it up"),
        ("assistant", "checking", [("c1", "lookup", {"q": "x"})]),
        ("tool", "c1", "x found"),
        ("assistant", "x is found", []),
    ]
    response = history[1]
    assert isinstance(response, ModelResponse)
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)


def test_rows_as_the_store_returns_them_or_as_json_text_read_the_same() -> None:
    calls = [{"id": "c1", "name": "lookup", "args": {"q": "x"}}]
    results = [{"id": "c1", "name": "lookup", "text": "ok", "details": {"code": None}}]
    parsed = [row("user", "u"), row("assistant", "", calls), row("tool", results=results)]
    as_text = [{**r, "tool_calls": json.dumps(r["tool_calls"]),
                "tool_results": json.dumps(r["tool_results"])} for r in parsed]  # fmt: skip
    assert view(history_from_turns(parsed)) == view(history_from_turns(as_text))


def test_results_answer_first_then_the_next_user_text_in_one_request() -> None:
    turns = [
        row("user", "go"),
        row("assistant", "", [{"id": "a", "name": "t", "args": "{}"}]),
        row("user", "also this"),  # a queued message recorded before the results of its request
        row("tool", results=[{"id": "a", "name": "t", "text": "done"}]),
    ]
    history = history_from_turns(turns)
    assert len(history) == 3
    last = history[2]
    assert isinstance(last, ModelRequest)
    assert [type(p) for p in last.parts] == [ToolReturnPart, UserPromptPart]


def test_an_unanswered_call_gets_a_result_and_an_orphan_result_is_dropped() -> None:
    turns = [
        row("user", "go"),
        row("assistant", "", [{"id": "a", "name": "t", "args": "{}"}, {"id": "b", "name": "t"}]),
        row(
            "tool",
            results=[
                {"id": "a", "name": "t", "text": "done"},
                {"id": "zz", "name": "t", "text": "answers nothing"},
            ],
        ),
        row("user", "next"),
    ]
    assert view(history_from_turns(turns)) == [
        ("user", "go"),
        ("assistant", "", [("a", "t", {}), ("b", "t", {})]),
        ("tool", "a", "done"),
        ("tool", "b", UNANSWERED),
        ("user", "next"),
    ]


def test_a_history_that_ends_on_tool_calls_is_closed() -> None:
    turns = [row("user", "go"), row("assistant", "", [{"id": "a", "name": "t", "args": "{}"}])]
    assert view(history_from_turns(turns))[-1] == ("tool", "a", UNANSWERED)


def test_odd_rows_never_crash() -> None:
    turns: list[dict[str, Any]] = [
        {"role": "system", "text": "ignored"},
        {"role": "user"},
        {"role": "assistant", "tool_calls": "not json", "input_tokens": -3, "output_tokens": True},
        {"role": "assistant", "tool_calls": [3, {"id": "", "name": "t"}, {"id": "x"}]},
        {"role": "tool", "tool_results": {"id": "x"}},
        {},
    ]
    assert view(history_from_turns(turns)) == [
        ("user", ""),
        ("assistant", "", []),
        ("assistant", "", []),
    ]
    assert history_from_turns([]) == []


# -- round trip: what a real session records comes back as what it had ---------------------------


class EchoArgs(BaseModel):
    x: str


async def _echo(params: EchoArgs, ctx: Any) -> str:
    return f"echo {params.x}"


ECHO = ToolSpec(name="echo", description="Echo x.", params=EchoArgs, execute=_echo)

#: one model step: a text answer, or a batch of calls (``None`` args: invalid, a retry)
step = st.one_of(
    st.text(max_size=20).map(lambda t: ("text", t)),
    st.lists(st.one_of(st.none(), st.text(max_size=8)), min_size=1, max_size=3).map(
        lambda xs: ("calls", xs)
    ),
)
#: prompts, each with the steps the model takes before its final text
plans = st.lists(
    st.tuples(st.text(min_size=1, max_size=20), st.lists(step, max_size=3), st.text(max_size=20)),
    min_size=1,
    max_size=3,
)


def scripted(plan: list[tuple[str, list[tuple[str, Any]], str]]) -> FunctionModel:
    steps: list[ModelResponse] = []
    for _, middle, final in plan:
        for kind, value in middle:
            if kind == "calls":
                parts = [ToolCallPart("echo", {} if x is None else {"x": x}) for x in value]
                steps.append(ModelResponse(parts=[TextPart("calling"), *parts]))
        steps.append(ModelResponse(parts=[TextPart(final or "done")]))
    queue = iter(steps)

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return next(queue)

    return FunctionModel(answer)


@settings(max_examples=25, deadline=None)
@given(plan=plans)
def test_what_a_session_records_restores_to_what_it_had(plan: Any) -> None:
    async def run() -> tuple[list[ModelMessage], list[ModelMessage]]:
        store = Store(":memory:")
        session = Session(scripted(plan), "be brief", [ECHO], store=store)
        for prompt, _, _ in plan:
            await session.prompt(prompt)
        restored = history_from_turns(store.turns(session.session_id))
        store.close()
        return session.history, restored

    original, restored = asyncio.run(run())
    assert view(restored) == view(original)
