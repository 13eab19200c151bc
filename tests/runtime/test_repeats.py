"""Truncated and repeated tool calls, over the real wire: a call the provider cut
off at its output limit is answered ``truncated_call``; the same invalid call sent again names
the repetition; the same successful call sent again gets a coded ``repeated_call`` note."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai.exceptions import UnexpectedModelBehavior

from kernos.boundary import ToolContext, ToolSpec
from kernos.runtime import Config, Session, SessionEvent, resolve_model
from kernos.runtime._rules._foreign import from_source
from kernos.runtime._rules._repeats import RepeatGuard, repeat_due
from kernos.testing import FakeOpenAIServer, text, tool_call, tool_calls


class NoteParams(BaseModel):
    text: str
    count: int = 1


async def _note(params: NoteParams, ctx: ToolContext) -> str:
    return f"noted {params.text} x{params.count}"


NOTE = ToolSpec(name="write_note", description="Write a note.", params=NoteParams, execute=_note)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake, pytest.MonkeyPatch.context() as patch:
        for key, value in fake.env().items():
            patch.setenv(key, value)
        yield fake


def _session(events: list[SessionEvent], **kwargs: Any) -> Session:
    return Session(
        resolve_model("openai-chat:test", Config()),
        "Be brief.",
        [NOTE],
        on_event=events.append,
        retries=3,
        **kwargs,
    )


def _results(events: list[SessionEvent]) -> list[tuple[str | None, str]]:
    return [
        (e.data["result"].code, e.data["result"].text) for e in events if e.kind == "tool_result"
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_off_at_the_output_limit_is_answered_truncated_call(
    server: FakeOpenAIServer, stream: bool
) -> None:
    server.script(
        tool_call("write_note", '{"text": "a very long no', finish_reason="length"),
        tool_call("write_note", {"text": "short"}, when="was cut off"),
        text("done", when="noted short"),
    )
    events: list[SessionEvent] = []
    session = _session(events, stream=stream)
    assert asyncio.run(session.prompt("note it")) == "done"
    assert server.requests[0]["stream"] is stream
    (code, answer), second = _results(events)
    assert code == "truncated_call"
    assert re.search(
        r"Your call of `write_note` was cut off: the provider stopped your answer at its output "
        r"token limit \(\d+ tokens\) before the call's arguments were complete",
        answer,
    )
    assert "raise `max_tokens`" in answer and "split the work" in answer
    assert "not valid JSON" not in server.tool_results()[0]
    assert "was cut off" in server.tool_results()[0]
    assert second == (None, "noted short x1")
    server.assert_all_consumed()


def test_a_complete_call_in_a_cut_off_answer_still_runs(server: FakeOpenAIServer) -> None:
    server.script(
        tool_calls(
            ("write_note", {"text": "whole"}),
            ("write_note", '{"text": "cu'),
            finish_reason="length",
        ),
        text("done", when="was cut off"),
    )
    events: list[SessionEvent] = []
    assert asyncio.run(_session(events).prompt("note it")) == "done"
    codes = sorted(str(code) for code, _ in _results(events))
    assert codes == ["None", "truncated_call"]


def test_the_same_invalid_call_names_its_repetition_within_the_retry_budget(
    server: FakeOpenAIServer,
) -> None:
    bad = {"text": "x", "count": "many"}
    server.script(
        tool_call("write_note", bad),
        tool_call("write_note", bad, when="Fix"),
        tool_call("write_note", bad, when="Fix"),
        tool_call("write_note", {"text": "x"}, when="same call"),
        text("done", when="noted x"),
    )
    events: list[SessionEvent] = []
    assert asyncio.run(_session(events).prompt("note it")) == "done"
    results = _results(events)
    assert [code for code, _ in results] == ["invalid_arguments"] * 3 + [None]
    assert "same call" not in results[0][1] + results[1][1]
    assert results[2][1].endswith(
        "You sent this same call of `write_note` 3 times and it failed the same way each time: "
        "change the arguments as this message says, call another tool, or answer."
    )
    server.assert_all_consumed()

    server.script(tool_call("write_note", bad, repeat=True))  # the retry budget still ends it
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
        asyncio.run(_session([]).prompt("note it"))


def test_the_same_successful_call_gets_a_repeated_call_note_from_the_third(
    server: FakeOpenAIServer,
) -> None:
    same = {"text": "a"}
    server.script(
        tool_call("write_note", same),
        tool_call("write_note", '{ "text":"a" }', when="x1"),  # the same arguments, other text
        tool_call("write_note", same, when="x1"),
        tool_call("write_note", same, when="repeated_call"),
        text("done", when="4 times"),
    )
    events: list[SessionEvent] = []
    assert asyncio.run(_session(events).prompt("note it")) == "done"
    results = [answer for _, answer in _results(events)]
    assert results[:2] == ["noted a x1", "noted a x1"]
    assert results[2] == (
        "[repeated_call] You called `write_note` with these same arguments 3 times in a row and "
        "already have this result: use it, change the arguments, or answer.\n\nnoted a x1"
    )
    assert results[3].startswith("[repeated_call] You called `write_note` with these same "
                                 "arguments 4 times")  # fmt: skip
    assert not any(r.is_error for r in (e.data["result"] for e in events if "result" in e.data))


def test_another_call_between_starts_the_count_again_and_0_turns_the_guard_off(
    server: FakeOpenAIServer,
) -> None:
    a, b = {"text": "a"}, {"text": "b"}
    server.script(
        tool_call("write_note", a),
        tool_call("write_note", a, when="noted a"),
        tool_call("write_note", b, when="noted a"),
        tool_call("write_note", a, when="noted b"),
        text("done", when="noted a"),
    )
    events: list[SessionEvent] = []
    assert asyncio.run(_session(events).prompt("go")) == "done"
    assert not any("repeated_call" in answer for _, answer in _results(events))

    server.script(tool_call("write_note", a), *[tool_call("write_note", a, when="x1")] * 3)
    server.script(text("done", when="x1"))
    events = []
    assert asyncio.run(_session(events, repeat_limit=0).prompt("go")) == "done"
    assert [answer for _, answer in _results(events)] == ["noted a x1"] * 4


def test_the_guard_counts_identical_calls_in_a_row() -> None:
    guard = RepeatGuard()
    assert [guard.see("t", "k", True) for _ in range(3)] == [1, 2, 3]
    assert guard.see("t", "k", False) == 1  # another outcome is another call
    assert guard.see("u", "k", False) == 1
    assert guard.see("u", "k", False) == 2
    assert [repeat_due(3, n) for n in (1, 2, 3, 4)] == [False, False, True, True]
    assert not repeat_due(0, 10)


def test_the_note_on_a_foreign_tools_result_stays_outside_its_delimiters(
    server: FakeOpenAIServer,
) -> None:
    foreign = from_source(NOTE, "mcp:notes")
    same = {"text": "a"}
    server.script(
        tool_call("write_note", same),
        *[tool_call("write_note", same, when="x1")] * 2,
        text("done", when="x1"),
    )
    session = Session(resolve_model("openai-chat:test", Config()), "Be brief.", [foreign])
    assert asyncio.run(session.prompt("go")) == "done"
    third = server.tool_results()[2]
    assert third.startswith("[repeated_call] You called `write_note` with these same arguments 3")
    assert '\n\n<tool-result source="mcp:notes"' in third
