"""Compaction's pure rules (runtime/_rules/_compaction.py): what is compacted, what the model sees
after,
when a session compacts, and the config that says so."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot

from kernos.runtime import Config
from kernos.runtime._rules._compaction import (
    CompactSettings,
    Summary,
    calibrated,
    compacted_view,
    needs_compaction,
    render_transcript,
    span_to_compact,
    splits_a_call,
    turn_ends,
)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def say(text: str, *calls: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "look", "arguments": "{}"}}
            for c in calls
        ]
    return message


def result(call: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call, "content": f"result of {call}"}


HISTORY = [
    user("the task"),
    say("", "c1"),
    result("c1"),
    say("", "c2", "c3"),
    result("c2"),
    result("c3"),
    user("a later prompt"),
    say("noted"),
    say("", "c4"),
    result("c4"),
    say("done"),
]


def test_turns_end_after_the_results_that_answer_them() -> None:
    assert turn_ends(HISTORY) == [3, 6, 8, 10, 11]


def test_the_span_keeps_the_first_prompt_and_the_last_turns() -> None:
    span = span_to_compact(HISTORY, keep_turns=2)
    assert span is not None
    assert (span.start, span.end, span.first_turn, span.last_turn) == (1, 8, 1, 3)
    assert span_to_compact(HISTORY, keep_turns=5) is None  # nothing left between
    assert span_to_compact(HISTORY, keep_turns=2, covered=3) is None  # already summarised
    assert span_to_compact([say("hi")], keep_turns=0) is None  # no first prompt: no head


def test_the_view_replaces_the_span_with_one_summary_message() -> None:
    summary = Summary(1, 3, "Looked up c1..c3.", (("c2's exact value", "not needed again"),))
    view = compacted_view(HISTORY, summary)
    assert view[0] == HISTORY[0]
    assert view[2:] == HISTORY[8:]
    text = view[1]["content"]
    assert view[1]["role"] == "user"
    assert "summary of turns 1–3" in text
    assert "Looked up c1..c3." in text
    assert "c2's exact value (dropped because: not needed again)" in text
    assert compacted_view(HISTORY, None) == HISTORY


def test_the_transcript_numbers_turns_and_shows_calls_and_results() -> None:
    text = render_transcript(HISTORY[1:8])
    assert "## Turn 1: assistant" in text and "## Turn 3: assistant" in text
    assert "[tool call c2] look({})" in text and "[tool result c3]\nresult of c3" in text
    assert "## User\na later prompt" in text


def test_a_session_compacts_from_its_threshold_and_never_without_a_window() -> None:
    limits = CompactSettings(window=1000, at=0.8)
    assert limits.threshold == 800
    assert not needs_compaction(799, limits)
    assert needs_compaction(800, limits)
    assert not needs_compaction(10**9, None)


def test_the_offline_size_is_calibrated_by_the_providers_last_count() -> None:
    assert calibrated(100, None, None) == 100
    assert calibrated(100, 50, 60) == 110  # the provider's 60, plus 50 more since
    assert calibrated(100, 50, 0) == 100
    assert calibrated(10, 50, 30) == 0  # a compacted request: smaller, never negative


def test_compaction_settings_resolve_target_then_tasks_then_defaults() -> None:
    config = Config.model_validate(
        {
            "models": {"small": {"model": "openai-chat:s", "context_window": 4096}},
            "tasks": {"keep_turns": 2, "compact_model": "cheap"},
            "agents": {"a": {"compact_at": 0.5}},
            "categories": {"c": {"keep_turns": 6, "compact_model": "other"}},
        }
    )
    assert config.compaction("small", agent="a") == CompactSettings(4096, 0.5, 2, "cheap")
    assert config.compaction("small", category="c") == CompactSettings(4096, 0.8, 6, "other")
    assert config.compaction("small") == CompactSettings(4096, 0.8, 2, "cheap")
    assert config.compaction("openai-chat:s") is None  # no window known: never automatic
    assert Config().compaction("small") is None


@pytest.mark.parametrize("bad", [0, 1.5, -0.1])
def test_compact_at_is_a_fraction(bad: float) -> None:
    with pytest.raises(ValueError, match="compact_at"):
        Config.model_validate({"tasks": {"compact_at": bad}})


# -- the pairing property ---------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A lean loop's messages: prompts, answers with 0-3 calls each answered right after."""
    messages = [user("first")]
    counter = 0
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.booleans()):
            messages.append(user("more"))
        calls = []
        for _ in range(draw(st.integers(0, 3))):
            counter += 1
            calls.append(f"c{counter}")
        messages.append(say(draw(st.sampled_from(["", "text"])), *calls))
        messages += [result(c) for c in calls]
    return messages


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(0, 6), st.integers(0, 4))
def test_a_tool_call_is_never_split_from_its_result(
    messages: list[dict[str, Any]], keep: int, covered: int
) -> None:
    span = span_to_compact(messages, keep_turns=keep, covered=covered)
    if span is None:
        return
    assert not splits_a_call(messages, span.start)
    assert not splits_a_call(messages, span.end)
    kept_turns = len(turn_ends(messages)) - span.last_turn
    assert kept_turns >= keep and span.last_turn > covered
    view = compacted_view(messages, Summary(span.first_turn, span.last_turn, "s"))
    called = {c["id"] for m in view for c in m.get("tool_calls") or ()}
    answered = {m["tool_call_id"] for m in view if m["role"] == "tool"}
    assert called == answered  # every call sent has its result, every result its call


def test_model_facing_text_sizes_are_pinned() -> None:
    from kernos.compress._tools import read_text
    from kernos.runtime._rules._compaction import _template

    sizes = {
        "compaction_summary.md": len(_template()),
        "compact.md": len(read_text("compact.md")),
        "compact_request.md": len(read_text("compact_request.md")),
    }
    print(sizes)
    assert sizes == snapshot(
        {"compaction_summary.md": 417, "compact.md": 2549, "compact_request.md": 536}
    )
