"""A consumed tool's schema `pattern`s and `patternProperties` run bounded: a pathological one is a
validation failure with a clear message after at most PATTERN_SECONDS of matching, never a hang
(with Python's ``re`` these calls took minutes and held the GIL throughout)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kernos.boundary import (
    PatternTooComplex,
    ToolContext,
    ToolResult,
    call_tool,
    compile_pattern,
    schema_prepare,
    schema_tool,
)
from kernos.boundary._regex import MAX_PATTERN_SIZE, pattern_size

SLOW = "a" * 2000 + "!"
#: a hard bound on one call: a hang fails the test, not the suite
CALL_LIMIT = 60


def tool(schema: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    received: list[dict[str, Any]] = []

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        received.append(args)
        return ToolResult(text="ok")

    return schema_tool("lookup", "Look it up.", schema, execute), received


async def call(spec: Any, args: Any) -> ToolResult:
    result: ToolResult = await asyncio.wait_for(call_tool(spec, args), CALL_LIMIT)
    return result


@pytest.mark.timeout(120)
async def test_a_pathological_pattern_is_a_validation_failure() -> None:
    spec, received = tool(
        {"type": "object", "properties": {"q": {"type": "string", "pattern": "(a+)+$"}}}
    )
    result = await call(spec, {"q": SLOW})
    assert (result.code, received) == ("invalid_arguments", [])
    assert "- `q`: matching the value against the pattern '(a+)+$' took too long" in result.text
    assert "send a shorter or simpler value" in result.text


@pytest.mark.timeout(120)
async def test_a_pathological_pattern_property_is_a_validation_failure() -> None:
    spec, received = tool({"type": "object", "patternProperties": {"(a+)+$": {"type": "string"}}})
    result = await call(spec, {SLOW: "x"})
    assert (result.code, received) == ("invalid_arguments", [])
    assert "matching the property name 'aaaa" in result.text and "took too long" in result.text


@pytest.mark.timeout(120)
async def test_additional_properties_against_a_slow_pattern_count_as_extra() -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "patternProperties": {"(a+)+$": {"type": "string"}},
        "additionalProperties": False,
    }
    prepare = schema_prepare(schema)
    assert prepare({SLOW: "x", "q": "y"}) == {SLOW: "x", "q": "y"}  # kept: validation judges
    spec, received = tool(schema)
    result = await call(spec, {SLOW: "x", "q": "y"})
    assert (result.code, received) == ("invalid_arguments", [])


async def test_ordinary_patterns_still_check_values_and_names() -> None:
    spec, received = tool(
        {
            "type": "object",
            "properties": {"id": {"type": "string", "pattern": r"^(?=\w)[a-z]+(\d)\1$"}},
            "patternProperties": {"^x-": {"type": "integer"}},
            "additionalProperties": False,
        }
    )
    assert not (await call(spec, {"id": "abc11", "x-n": 1})).is_error
    bad = await call(spec, {"id": "abc12", "x-n": "one"})
    assert bad.code == "invalid_arguments"
    assert "- `id`: 'abc12' does not match" in bad.text
    assert "- `x-n`: 'one' is not of type 'integer'" in bad.text
    assert received == [{"id": "abc11", "x-n": 1}]


async def test_a_pattern_too_large_to_compile_leaves_the_value_to_the_tool() -> None:
    spec, received = tool(
        {"type": "object", "properties": {"q": {"type": "string", "pattern": "a{4294967294}"}}}
    )
    result = await call(spec, {"q": "b"})
    assert (result.is_error, received) == (False, [{"q": "b"}])


def test_pattern_size_counts_what_counted_repeats_write_out() -> None:
    assert pattern_size("abc") == 3
    assert pattern_size(r"\d{4}-\d{2}") == 7
    assert pattern_size("(?:a{1000}){100}") > MAX_PATTERN_SIZE
    assert pattern_size("[{]{3}x{2,}") == 5  # a class is one atom; {2,} repeats at least twice
    with pytest.raises(PatternTooComplex, match="too large to run"):
        compile_pattern("(?:(?:a{10}){10}){1000}")
    with pytest.raises(PatternTooComplex, match="over the limit of 1,000"):
        compile_pattern("a" * 1001)
