"""The pipeline: prepare → schema → semantic → execute, and its coded rejections."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from kernos.boundary import (
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    boolean_flag,
    call_tool,
    identifier,
    non_blank_text,
    schema_error_text,
    string_list,
)


class GreetParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str
    name: str | None = None
    tags: list[str] | None = None
    loud: bool | None = None


def prepare_greet(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    if "prompt" in raw:
        # required: never stripped, even when blank (validation answers it)
        out["prompt"] = raw["prompt"]
    for key, clean in (("name", identifier), ("tags", string_list), ("loud", boolean_flag)):
        value = clean(raw.get(key))
        if value is not None:
            out[key] = value
    return out


def validate_greet(params: GreetParams) -> ToolError | None:
    if non_blank_text(params.prompt) is None:
        return ToolError("blank_prompt", "prompt is blank; say what to greet with.")
    return None


calls: list[GreetParams] = []


async def execute_greet(params: GreetParams, ctx: ToolContext) -> str:
    calls.append(params)
    return f"{params.prompt} {params.name or 'world'}"


GREET = ToolSpec(
    name="greet",
    description="Greets.",
    params=GreetParams,
    execute=execute_greet,
    prepare=prepare_greet,
    validate=validate_greet,
)


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()


async def test_padding_is_removed_before_the_schema_sees_it() -> None:
    raw = {"prompt": "hi", "name": "  null ", "tags": ["", " "], "loud": "TRUE"}
    result = await call_tool(GREET, raw)
    assert result == ToolResult(text="hi world")
    assert calls == [GreetParams(prompt="hi", loud=True)]


async def test_raw_json_string_arguments_are_accepted() -> None:
    result = await call_tool(GREET, json.dumps({"prompt": "hey", "name": " ann "}))
    assert result.text == "hey ann"


async def test_malformed_json_is_a_coded_result_not_an_exception() -> None:
    result = await call_tool(GREET, '{"prompt": "hi"')
    assert result.is_error
    assert result.code == "invalid_json"
    assert "not valid JSON" in result.text
    assert calls == []


async def test_schema_errors_name_the_tool_each_field_and_the_fix() -> None:
    result = await call_tool(GREET, {"prompt": 3, "extra": 1, "tags": ["ok"]})
    assert result.is_error and result.code == "invalid_arguments" and result.stage == "schema"
    assert result.text.splitlines() == [
        "Invalid arguments for tool `greet`:",
        "- `prompt`: Input should be a valid string (got 3).",
        "Fix these fields and call `greet` again.",
    ]
    missing = await call_tool(GREET, {})
    assert "- `prompt`: required field is missing; add it." in missing.text


async def test_semantic_errors_return_the_message_and_keep_the_code() -> None:
    result = await call_tool(GREET, {"prompt": "   "})
    assert result.text == "prompt is blank; say what to greet with."
    assert result.details["code"] == "blank_prompt"
    assert result.stage == "semantic"
    assert calls == []


async def test_tool_error_raised_by_execute_is_a_semantic_result() -> None:
    async def refuse(params: GreetParams, ctx: ToolContext) -> str:
        raise ToolError("busy", "try later", {"retry_after": 3})

    spec = ToolSpec(name="refuse", description="x", params=GreetParams, execute=refuse)
    result = await call_tool(spec, {"prompt": "a"})
    assert result.details == {
        "retry_after": 3,
        "code": "busy",
        "stage": "semantic",
        "tool": "refuse",
    }


async def test_a_crashing_tool_becomes_tool_failed() -> None:
    async def boom(params: GreetParams, ctx: ToolContext) -> str:
        raise RuntimeError("disk full")

    spec = ToolSpec(name="boom", description="x", params=GreetParams, execute=boom)
    result = await call_tool(spec, {"prompt": "a"})
    assert result.code == "tool_failed" and "disk full" in result.text


async def test_default_prepare_turns_non_objects_into_empty_arguments() -> None:
    spec = ToolSpec(name="plain", description="x", params=GreetParams, execute=execute_greet)
    result = await call_tool(spec, "[1, 2]")
    assert result.code == "invalid_arguments"
    assert "required field is missing" in result.text


def test_bad_specs_fail_early() -> None:
    with pytest.raises(ValueError, match="not valid"):
        ToolSpec(name="bad name!", description="x", params=GreetParams, execute=execute_greet)
    with pytest.raises(TypeError, match="BaseModel"):
        ToolSpec(name="ok", description="x", params=dict, execute=execute_greet)  # type: ignore[arg-type]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
argument_objects = st.dictionaries(
    st.sampled_from(["prompt", "name", "tags", "loud", "other"]), json_values, max_size=5
)


deep_text = st.builds(
    lambda opener, depth: opener * depth + ("]" if opener == "[" else "") * depth,
    st.sampled_from(["[", '{"prompt":']),
    st.integers(min_value=90, max_value=20_000),
)


@settings(max_examples=300, deadline=None)
@given(raw=json_values | argument_objects | st.text(max_size=30) | deep_text)
async def test_no_input_crashes_and_every_rejection_has_a_code(raw: Any) -> None:
    result = await call_tool(GREET, raw)
    assert isinstance(result, ToolResult)
    if result.is_error:
        assert result.code in {"invalid_json", "invalid_arguments", "blank_prompt"}
        assert result.text
    else:
        assert calls and calls[-1].prompt.strip()


def nested(depth: int, kind: str) -> Any:
    """A value nested ``depth`` levels deep, built without recursion."""
    value: Any = "leaf"
    for _ in range(depth):
        value = [value] if kind == "array" else {"prompt": value}
    return value


@pytest.mark.parametrize("kind", ["array", "object"])
async def test_arguments_nested_10000_deep_as_text_are_invalid_json(kind: str) -> None:
    opener, closer = ("[", "]") if kind == "array" else ('{"prompt": ', "}")
    raw = opener * 10_000 + ("1" if kind == "object" else "") + closer * 10_000
    result = await call_tool(GREET, raw)
    assert result.is_error and result.code == "invalid_json" and result.stage == "json"
    assert "more than 100 levels deep" in result.text
    assert calls == []


@pytest.mark.parametrize("kind", ["array", "object"])
async def test_arguments_nested_10000_deep_as_a_value_are_invalid_arguments(kind: str) -> None:
    raw = nested(10_000, kind)
    for spec in (GREET, ToolSpec("plain", "x", GreetParams, execute_greet)):
        result = await call_tool(spec, raw if kind == "object" else {"prompt": "hi", "tags": raw})
        assert result.is_error and result.code == "invalid_arguments"
        assert "more than 100 levels deep" in result.text
    assert calls == []


async def test_nesting_the_parser_takes_but_the_schema_rejects_is_still_a_coded_result() -> None:
    # under the cap, a rejected deep value is shown in the retry text without recursing out
    result = await call_tool(GREET, {"prompt": nested(90, "array")})
    assert result.code == "invalid_arguments"
    assert result.text.startswith("Invalid arguments for tool `greet`:\n- `prompt`: Input should")


def test_schema_error_text_shows_a_value_too_deep_for_json_dumps() -> None:
    with pytest.raises(ValidationError) as caught:
        TypeAdapter(int).validate_python(nested(10_000, "array"))
    assert schema_error_text("t", caught.value).splitlines()[1] == (
        "- `(arguments)`: Input should be a valid integer"
        " (got (a value nested too deeply to show))."
    )


async def test_a_prepare_that_nests_past_the_validator_is_a_coded_result() -> None:
    spec = ToolSpec(
        "deep", "x", GreetParams, execute_greet, prepare=lambda raw: {"prompt": nested(5000, "o")}
    )
    result = await call_tool(spec, {})
    assert result.is_error and result.code == "invalid_arguments"


async def test_lone_surrogates_in_arguments_reach_the_tool_as_u_fffd() -> None:
    result = await call_tool(GREET, '{"prompt": "done \\ud800 ok", "name": "\\udfff"}')
    assert result == ToolResult(text="done \ufffd ok \ufffd")
    emoji = await call_tool(GREET, '{"prompt": "\\ud83d\\ude00"}')  # a valid pair stays itself
    assert emoji.text == "\U0001f600 world"
