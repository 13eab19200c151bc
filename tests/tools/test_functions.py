"""Python functions as tools: signature → schema, docstring → description, padding
stripped by a prepare derived from the signature, sync functions in a thread."""

from __future__ import annotations

import threading
from typing import Literal

from hypothesis import given
from hypothesis import strategies as st
from inline_snapshot import snapshot

from kernos.boundary import ToolContext, ToolError, call_tool
from kernos.tools import doc_descriptions, function_tool


def lookup(
    city: str,
    units: Literal["metric", "imperial"] = "metric",
    days: int = 1,
    detailed: bool = False,
    tags: list[str] | None = None,
    note: str | None = "keep",
) -> str:
    """Look up the weather for a city.

    Uses the bundled table only.

    Args:
        city: The city's name, e.g. Oslo.
        units: Unit system for temperatures.
        days: How many days ahead.
        detailed: Include wind and humidity.
        tags: Labels to attach.
        note: A free note.
    """
    return f"{city}|{units}|{days}|{detailed}|{tags}|{note}"


def test_schema_and_description_come_from_signature_and_docstring() -> None:
    spec = function_tool(lookup)
    assert spec.name == "lookup"
    assert spec.description == "Look up the weather for a city.\n\nUses the bundled table only."
    schema = spec.schema()
    assert schema["required"] == ["city"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["city"] == snapshot(
        {"description": "The city's name, e.g. Oslo.", "title": "City", "type": "string"}
    )
    assert schema["properties"]["units"] == snapshot(
        {
            "default": "metric",
            "description": "Unit system for temperatures.",
            "enum": ["metric", "imperial"],
            "title": "Units",
            "type": "string",
        }
    )
    assert schema["properties"]["days"]["type"] == "integer"
    assert schema["properties"]["detailed"]["description"] == "Include wind and humidity."


def test_doc_descriptions_without_a_docstring() -> None:
    def bare(x: int) -> int:
        return x

    assert doc_descriptions(bare) == ("", {})
    assert function_tool(bare).description.startswith("Calls ")


async def test_padding_in_optional_parameters_is_stripped() -> None:
    spec = function_tool(lookup)
    padded = {
        "city": "Oslo",
        "units": "null",
        "days": "",
        "detailed": "TRUE",
        "tags": [],
        "note": "  ",
        "extra": "unused",
    }
    assert spec.prepare(padded) == {"city": "Oslo", "detailed": True}
    result = await call_tool(spec, padded)
    assert result.text == "Oslo|metric|1|True|None|keep"


async def test_required_parameters_are_never_stripped() -> None:
    spec = function_tool(lookup)
    assert spec.prepare({"city": ""}) == {"city": ""}
    assert spec.prepare({"city": None}) == {"city": None}
    result = await call_tool(spec, {"city": None})
    assert result.code == "invalid_arguments" and "`city`" in result.text


def test_null_is_kept_where_none_is_a_real_value() -> None:
    def f(limit: int | None = 10, name: str = "x") -> str:
        return f"{limit}"

    spec = function_tool(f)
    # None differs from the default 10: the model meant "no limit"
    assert spec.prepare({"limit": None}) == {"limit": None}
    # a null word is absent only where the type rejects it
    assert spec.prepare({"limit": "none", "name": "none"}) == {"name": "none"}


async def test_sync_functions_run_in_a_thread_async_ones_are_awaited() -> None:
    seen: list[str] = []

    def sync_tool(x: int) -> int:
        seen.append(threading.current_thread().name)
        return x * 2

    async def async_tool(x: int) -> dict[str, int]:
        seen.append(threading.current_thread().name)
        return {"double": x * 2}

    assert (await call_tool(function_tool(sync_tool), {"x": "21"})).text == "42"
    assert (await call_tool(function_tool(async_tool), {"x": 2})).text == '{"double":4}'
    main = threading.current_thread().name
    assert seen[0] != main and seen[1] == main


async def test_a_raising_function_is_tool_failed_and_a_tool_error_is_coded() -> None:
    def broken(x: int) -> str:
        raise RuntimeError("disk on fire")

    def picky(x: int) -> str:
        raise ToolError("too_big", "x must be below 10; pass a smaller x")

    failed = await call_tool(function_tool(broken), {"x": 1})
    assert (failed.code, failed.text) == (
        "tool_failed",
        "Tool `broken` failed: RuntimeError: disk on fire",
    )
    coded = await call_tool(function_tool(picky), {"x": 11})
    assert (coded.code, coded.text) == ("too_big", "x must be below 10; pass a smaller x")


async def test_a_tool_context_parameter_is_injected_not_shown() -> None:
    def who(ctx: ToolContext, greeting: str = "hi") -> str:
        return f"{greeting} {ctx.agent}"

    spec = function_tool(who, name="who_am_i", description="Say who calls.")
    assert spec.name == "who_am_i" and spec.description == "Say who calls."
    assert "ctx" not in spec.schema()["properties"]
    assert (await call_tool(spec, {}, ToolContext(agent="explore"))).text == "hi explore"


def test_star_args_are_refused() -> None:
    def loose(*args: int) -> None: ...

    try:
        function_tool(loose)
    except TypeError as exc:
        assert "takes *args; a tool function needs named parameters only" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected TypeError")


PADDING = st.sampled_from([None, "", "  ", [], {}, "null", "None", "undefined"])
NULL_TEXT = ("null", "None", "undefined")


@given(
    city=st.one_of(PADDING, st.text()),
    optional=st.dictionaries(
        st.sampled_from(["units", "days", "detailed", "tags", "note"]), PADDING, max_size=5
    ),
)
def test_property_required_kept_padding_never_passes(
    city: object, optional: dict[str, object]
) -> None:
    prepared = function_tool(lookup).prepare({"city": city, **optional})
    assert prepared.pop("city") == city  # a required parameter is never stripped or changed
    # padding survives only where it is a value: None where the default differs
    # (note: str | None = "keep"), and a null word in a plain text parameter
    assert set(prepared) <= {"note"}
    assert prepared.get("note", None) in (None, *NULL_TEXT)
