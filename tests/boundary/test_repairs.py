"""Repair receipts — what the boundary changed in a call, as data, never in the
text the model reads."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot

from kernos.boundary import (
    ABSENT,
    Repair,
    ToolContext,
    ToolResult,
    call_tool,
    describe_repairs,
    find_repairs,
    repairs_data,
    repairs_from_data,
    schema_tool,
)
from kernos.runtime import scrub_result
from kernos.tasks import normalize_task_arguments
from kernos.tasks._steps import tool_record, tool_result

LOOKUP = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer"},
        "exact": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"type": "string"},
    },
    "required": ["query", "limit"],
}


async def _echo(args: dict[str, Any], ctx: ToolContext) -> str:
    return json.dumps(args, sort_keys=True)


def lookup() -> Any:
    return schema_tool("lookup", "Look things up.", LOOKUP, _echo)


def run(raw: Any) -> ToolResult:
    return asyncio.run(call_tool(lookup(), raw))


def test_a_padded_stringified_call_carries_its_receipt_and_the_clean_result() -> None:
    sent = {"query": "kernos", "limit": "5", "exact": "TRUE", "tags": '["a"]', "note": ""}
    repaired = run(json.dumps(sent))
    clean = run({"query": "kernos", "limit": 5, "exact": True, "tags": ["a"]})
    # the model reads exactly what a clean call gets: it is not taught to pad
    assert (repaired.text, repaired.details, repaired.is_error) == (
        clean.text,
        clean.details,
        clean.is_error,
    )
    assert clean.repairs == ()
    assert [r.as_dict() for r in repaired.repairs] == [
        {"field": "limit", "sent": "5", "became": 5, "rule": "coerced"},
        {"field": "exact", "sent": "TRUE", "became": True, "rule": "coerced"},
        {"field": "tags", "sent": '["a"]', "became": ["a"], "rule": "decoded"},
        {"field": "note", "sent": "", "rule": "padding"},
    ]
    assert describe_repairs("lookup", repaired.repairs) == snapshot(
        'lookup repaired: limit "5" → 5 (coerced); exact "TRUE" → true (coerced); '
        'tags "[\\"a\\"]" → ["a"] (decoded); note "" → absent (padding)'
    )


def test_a_rejected_call_carries_the_repairs_made_before_the_rejection() -> None:
    result = run({"query": "", "limit": "many", "note": ""})
    assert result.code == "invalid_arguments"
    receipt = [r.as_dict() for r in result.repairs]
    assert receipt == [{"field": "note", "sent": "", "rule": "padding"}]


def test_the_task_tools_own_rules_are_named() -> None:
    sent = {
        "tasks": [
            {"prompt": "unused", "category": "quick"},
            {"prompt": "Audit it.", "task_summary": "word  " * 30, "load_skills": "review"},
            "not an item",
        ],
        "model": "",
    }
    found = find_repairs(sent, normalize_task_arguments(sent))
    assert [(r.field, r.rule) for r in found] == [
        ("tasks[0]", "item_dropped"),
        ("tasks[1].task_summary", "clamped"),
        ("tasks[1].load_skills", "wrapped"),
        ("tasks[2]", "item_dropped"),
        ("model", "padding"),
    ]
    assert found[0].became is ABSENT


def test_each_rule_by_its_change() -> None:
    assert [
        (r.field, r.rule)
        for r in find_repairs(
            {"a": " x ", "b": "a  b", "c": None, "d": "extra", "e": {"f": [1, "2"]}},
            {"a": "x", "b": "a b", "e": {"f": [1, 2]}, "g": 0},
        )
    ] == [
        ("a", "trimmed"),
        ("b", "collapsed"),
        ("c", "padding"),
        ("d", "dropped"),
        ("e.f[1]", "coerced"),
        ("g", "added"),
    ]
    assert find_repairs("text", {}) == (Repair("", "text", {}, "rewritten"),)


def test_a_receipt_survives_a_durable_record_and_is_scrubbed() -> None:
    secret = "sk-proj-abcdefgh12345678"
    result = ToolResult("ok", repairs=(Repair("token", secret, ABSENT, "dropped"),))
    scrubbed = scrub_result(result)
    assert scrubbed.repairs[0].sent == "[redacted]"
    assert scrubbed.repairs[0].became is ABSENT
    replayed = tool_result(json.loads(json.dumps(tool_record(scrubbed))))
    assert replayed.repairs == scrubbed.repairs


def test_a_receipt_as_json_data_reads_back_as_it_was() -> None:
    """One encoding for the store, a durable step's record and the scrubber."""
    repairs = (
        Repair("limit", "5", 5, "coerced"),
        Repair("x", "", ABSENT, "padding"),
        Repair("tasks[1]", ABSENT, {"a": 1}, "added"),
    )
    data = repairs_data(repairs)
    assert json.loads(json.dumps(data)) == data
    assert repairs_from_data(json.loads(json.dumps(data))) == repairs
    assert repairs_from_data([*data, "junk", {"field": 3}]) == repairs
    assert repairs_from_data(None) == repairs_from_data("x") == ()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(JSON, JSON)
def test_finding_repairs_never_raises_and_an_unchanged_call_has_none(a: Any, b: Any) -> None:
    assert find_repairs(a, a) == ()
    found = find_repairs(a, b)
    assert all(isinstance(r, Repair) for r in found)
    assert (found == ()) == (type(a) is type(b) and a == b)
    json.dumps([r.as_dict() for r in found])
