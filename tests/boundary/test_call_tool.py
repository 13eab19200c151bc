"""The pipeline: prepare → schema → semantic → execute, and its coded rejections."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from kernos.boundary import (
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    boolean_flag,
    call_tool,
    identifier,
    non_blank_text,
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


@settings(max_examples=300, deadline=None)
@given(raw=json_values | argument_objects | st.text(max_size=30))
async def test_no_input_crashes_and_every_rejection_has_a_code(raw: Any) -> None:
    result = await call_tool(GREET, raw)
    assert isinstance(result, ToolResult)
    if result.is_error:
        assert result.code in {"invalid_json", "invalid_arguments", "blank_prompt"}
        assert result.text
    else:
        assert calls and calls[-1].prompt.strip()
