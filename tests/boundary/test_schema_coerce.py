"""Lossless coercion by the schema: text a provider sent for a property that takes no string
becomes the value it spells; text for a property that takes a string stays text; only ``""`` is
padding. The same for schema-only tools (``schema_prepare``/``schema_tool``) and function tools.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernos.boundary import (
    MAX_ARGUMENT_DEPTH,
    ToolContext,
    ToolResult,
    call_tool,
    schema_prepare,
    schema_tool,
)
from kernos.tools import LocalWorkspace, builtin_tools, function_tool


def obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required or []}


def one(prop: dict[str, Any], value: Any, *, required: bool = False) -> dict[str, Any]:
    return schema_prepare(obj({"x": prop}, ["x"] if required else []))({"x": value})


# -- numbers and booleans sent as text -----------------------------------------------------------


def test_numbers_as_text_in_required_fields_become_numbers() -> None:
    schema = obj({"base": {"type": "integer"}, "height": {"type": "integer"}}, ["base", "height"])
    assert schema_prepare(schema)({"base": "10", "height": "5"}) == {"base": 10, "height": 5}


@pytest.mark.parametrize("required", [True, False])
@pytest.mark.parametrize(
    ("prop", "value", "expected"),
    [
        ({"type": "integer"}, "-3", -3),
        ({"type": "integer"}, "4.0", 4),
        ({"type": "number"}, "2.5", 2.5),
        ({"type": "number"}, "1e3", 1000.0),
        ({"type": ["number", "null"]}, "7", 7),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "12", 12),
        ({"type": "boolean"}, "TRUE", True),
        ({"type": "boolean"}, "false", False),
        ({"type": ["boolean", "integer"]}, "true", True),
        ({"type": ["boolean", "integer"]}, "8", 8),
        ({"$ref": "#/$defs/n"}, "9", 9),
        (
            {"anyOf": [{"anyOf": [{"type": "boolean"}, {"type": "null"}]}, {"type": "null"}]},
            "false",
            False,
        ),
    ],
)
def test_text_spelling_a_number_or_boolean_becomes_it(
    prop: dict[str, Any], value: str, expected: Any, required: bool
) -> None:
    schema = {**obj({"x": prop}, ["x"] if required else []), "$defs": {"n": {"type": "integer"}}}
    result = schema_prepare(schema)({"x": value})
    assert result == {"x": expected}
    assert type(result["x"]) is type(expected)


@pytest.mark.parametrize("required", [True, False])
@pytest.mark.parametrize(
    ("prop", "value"),
    [
        ({"type": "string"}, "10"),
        ({"type": "string"}, "true"),
        ({"type": ["integer", "string"]}, "10"),
        ({"anyOf": [{"type": "boolean"}, {"type": "string"}]}, "false"),
        ({"anyOf": [{"type": "integer"}, {"enum": ["7", "all"]}]}, "7"),
        ({"description": "no type: anything goes"}, "3"),
        ({"type": "integer"}, "5.5"),
        ({"type": "integer"}, "ten"),
        ({"type": "number"}, "1e999"),
        ({"type": "boolean"}, "yes"),
    ],
)
def test_text_is_kept_where_the_schema_takes_it_or_it_spells_no_value(
    prop: dict[str, Any], value: str, required: bool
) -> None:
    assert one(prop, value, required=required) == {"x": value}


# -- arrays and objects sent as JSON text --------------------------------------------------------


def test_an_array_sent_as_json_text_is_decoded() -> None:
    schema = obj({"stops": {"type": "array", "items": {"type": "string"}}}, ["stops"])
    raw = {"stops": '["Santa Barbara", "Monterey"]'}
    assert schema_prepare(schema)(raw) == {"stops": ["Santa Barbara", "Monterey"]}


@pytest.mark.parametrize("required", [True, False])
def test_decoded_values_are_cleaned_by_their_own_schema(required: bool) -> None:
    item = obj({"id": {"type": "integer"}, "tag": {"type": "string"}}, ["id"])
    prop = {
        "type": "object",
        "properties": {
            "ids": {"type": "array", "items": {"type": "integer"}},
            "rows": {"type": "array", "items": item},
            "note": {"type": "string"},
            "on": {"type": "boolean"},
        },
    }
    text = json.dumps(
        {"ids": ["1", 2], "rows": '[{"id": "3", "tag": ""}]', "note": "[1]", "on": "True"}
    )
    assert one(prop, text, required=required) == {
        "x": {"ids": [1, 2], "rows": [{"id": 3}], "note": "[1]", "on": True}
    }


def test_array_entries_sent_as_text_are_coerced_and_never_dropped() -> None:
    prop = {"type": "array", "items": {"type": "integer"}}
    assert one(prop, ["1", "", "x", 4], required=True) == {"x": [1, "", "x", 4]}
    nested = {"type": "array", "items": {"type": "array", "items": {"type": "boolean"}}}
    assert one(nested, '[["true"], "[false]"]') == {"x": [[True], [False]]}


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "string"},
        {"type": ["array", "string"]},
        {"anyOf": [{"type": "object"}, {"type": "string"}]},
        {},
    ],
)
@pytest.mark.parametrize("text", ['["a", "b"]', '{"k": 1}', " [1] "])
def test_json_text_stays_text_where_the_schema_takes_a_string(
    prop: dict[str, Any], text: str
) -> None:
    assert one(prop, text) == {"x": text}
    assert one(prop, text, required=True) == {"x": text}


@pytest.mark.parametrize(
    ("prop", "text"),
    [
        ({"type": "array"}, '{"k": 1}'),  # an object for an array
        ({"type": "object"}, "[1, 2]"),  # an array for an object
        ({"type": "array"}, "[1, 2"),  # not JSON
        ({"type": "array"}, "a, b"),
        ({"type": "object"}, '{"k": }'),
        ({"type": ["array", "null"]}, '"[1]"'),  # a JSON string, not an array
    ],
)
def test_text_that_does_not_decode_to_the_accepted_type_is_left_for_the_validator(
    prop: dict[str, Any], text: str
) -> None:
    assert one(prop, text, required=True) == {"x": text}
    assert one(prop, text) == {"x": text}


def test_empty_json_text_for_an_optional_container_is_padding() -> None:
    assert one({"type": "array"}, "[]") == {}
    assert one({"type": "object"}, " {} ") == {}
    assert one({"type": "array"}, "[]", required=True) == {"x": []}


def test_decoded_text_is_cleaned_of_lone_surrogates() -> None:
    assert one({"type": "array"}, '["a\\ud800"]') == {"x": ["a\ufffd"]}


def test_decoding_is_bounded_by_size_and_depth() -> None:
    from kernos.boundary._schema import MAX_JSON_TEXT

    prop = {"type": "array", "items": {"type": "string"}}
    fits = json.dumps(["a" * (MAX_JSON_TEXT - 10)])
    assert one(prop, fits, required=True) == {"x": json.loads(fits)}
    too_long = json.dumps(["a" * MAX_JSON_TEXT])
    assert one(prop, too_long, required=True) == {"x": too_long}
    # the arguments dict and the array it holds: the decoded text may nest MAX - 1 deep
    deepest = "[" * (MAX_ARGUMENT_DEPTH - 1) + "]" * (MAX_ARGUMENT_DEPTH - 1)
    assert one({"type": "array"}, deepest, required=True) == {"x": json.loads(deepest)}
    too_deep = "[" + deepest + "]"
    assert one({"type": "array"}, too_deep, required=True) == {"x": too_deep}
    runaway = "[" * 100_000 + "]" * 100_000
    assert one({"type": "array"}, runaway, required=True) == {"x": runaway}


def test_depth_counts_where_the_text_sits() -> None:
    """Text decoded deep inside the arguments may nest only as deep as is left above it."""
    node = {
        "type": ["object", "array"],
        "properties": {"x": {"$ref": "#/$defs/node"}},
        "required": ["x"],
    }
    prepare = schema_prepare({"$defs": {"node": node}, "$ref": "#/$defs/node"})

    def wrapped(inner: Any, levels: int) -> Any:
        for _ in range(levels):
            inner = {"x": inner}
        return inner

    levels = MAX_ARGUMENT_DEPTH - 10  # objects around the text
    fits = "[" * 10 + "]" * 10
    assert prepare(wrapped(fits, levels)) == wrapped(json.loads(fits), levels)
    too_deep = "[" + fits + "]"
    assert prepare(wrapped(too_deep, levels)) == wrapped(too_deep, levels)


# -- only "" is padding ---------------------------------------------------------------------------


def test_whitespace_is_a_value_and_only_the_empty_string_is_padding() -> None:
    schema = obj({"separator": {"type": "string"}, "count": {"type": "integer"}})
    prepare = schema_prepare(schema)
    assert prepare({"separator": " "}) == {"separator": " "}
    assert prepare({"separator": "\t"}) == {"separator": "\t"}
    assert prepare({"separator": ""}) == {}
    assert prepare({"count": " "}) == {"count": " "}  # not a number: the validator says so
    assert prepare({"extra": " ", "more": ""}) == {"extra": " "}


# -- the properties: a valid call is kept; a stringified valid call comes back -------------------

TRICKY_TEXT = [" ", "\t", "10", "-2.5", "true", "FALSE", "null", "[1, 2]", '{"a": 1}', "[]", "{}"]
SCALARS = ["string", "integer", "number", "boolean"]


@st.composite
def schemas(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    """A small JSON schema: typed scalars, type lists, anyOf with null, enums, arrays, objects."""
    kinds = ["scalar", "scalar", "type_list", "nullable", "enum"]
    if depth < 3:
        kinds += ["array", "object", "object"]
    kind = draw(st.sampled_from(kinds))
    if kind == "scalar":
        return {"type": draw(st.sampled_from(SCALARS))}
    if kind == "type_list":
        first, second = draw(
            st.lists(st.sampled_from(SCALARS), min_size=2, max_size=2, unique=True)
        )
        return {"type": [first, second]}
    if kind == "nullable":
        inner = draw(schemas(depth + 1))
        if draw(st.booleans()) and isinstance(inner.get("type"), str):
            return {**inner, "type": [inner["type"], "null"]}
        return {"anyOf": [inner, {"type": "null"}]}
    if kind == "enum":
        return {
            "type": "string",
            "enum": draw(
                st.lists(st.sampled_from([*TRICKY_TEXT, "a"]), min_size=1, max_size=3, unique=True)
            ),
        }
    if kind == "array":
        return {"type": "array", "items": draw(schemas(depth + 1))}
    return draw(object_schemas(depth + 1))


@st.composite
def object_schemas(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True))
    props = {key: draw(schemas(depth)) for key in keys}
    schema: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "required": draw(st.lists(st.sampled_from(keys), unique=True)),
    }
    if draw(st.booleans()):
        schema["additionalProperties"] = False
    return schema


def _types(schema: dict[str, Any]) -> list[str]:
    declared = schema.get("type")
    return [declared] if isinstance(declared, str) else list(declared or [])


@st.composite
def values(draw: st.DrawFn, schema: dict[str, Any]) -> Any:
    """A value ``schema`` accepts that holds no padding (no ``""``, ``[]``, ``{}``)."""
    if "anyOf" in schema:
        return draw(values(draw(st.sampled_from(schema["anyOf"]))))
    if "enum" in schema:
        return draw(st.sampled_from(schema["enum"]))
    kind = draw(st.sampled_from(_types(schema)))
    if kind == "null":
        return None
    if kind == "string":
        return draw(st.sampled_from(TRICKY_TEXT) | st.text(min_size=1, max_size=6))
    if kind == "integer":
        return draw(st.integers(-(10**20), 10**20))
    if kind == "number":
        return draw(st.integers(-1000, 1000) | st.floats(allow_nan=False, allow_infinity=False))
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "array":
        return draw(st.lists(values(schema["items"]), min_size=1, max_size=3))
    props: dict[str, Any] = schema["properties"]
    required = set(schema["required"])
    keys = [k for k in props if k in required or draw(st.booleans())] or [next(iter(props))]
    out = {key: draw(values(props[key])) for key in keys}
    if "additionalProperties" not in schema and draw(st.booleans()):
        out["zz"] = draw(st.sampled_from([" ", "5", "[1]", 0, False]))  # undeclared, not padding
    return out


@st.composite
def stringified(draw: st.DrawFn, schema: dict[str, Any], value: Any, *, root: bool = False) -> Any:
    """``value`` with fields the schema takes no string for sent as text, as providers do."""
    if value is None:
        return None
    if "anyOf" in schema:
        branch = next(b for b in schema["anyOf"] if b.get("type") != "null")
        return draw(stringified(branch, value))
    if "enum" in schema or "string" in _types(schema):
        return value
    if isinstance(value, bool):
        text = "true" if value else "false"
        return draw(st.sampled_from([text, text.upper(), text.title()]))
    if isinstance(value, int | float):
        return json.dumps(value) if draw(st.booleans()) else value
    if isinstance(value, list):
        value = [draw(stringified(schema["items"], entry)) for entry in value]
    else:
        props = schema["properties"]
        value = {k: draw(stringified(props[k], v)) if k in props else v for k, v in value.items()}
    return json.dumps(value) if not root and draw(st.booleans()) else value


@st.composite
def valid_calls(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = draw(object_schemas())
    call = draw(values(schema))
    jsonschema.Draft202012Validator(schema).validate(call)  # the generator's own check
    return schema, call


def exact(value: Any) -> str:
    """A comparison that tells ``1`` from ``True`` and ``1`` from ``1.0``."""
    return json.dumps(value)


@settings(max_examples=200, deadline=None)
@given(valid_calls())
def test_prepare_never_changes_a_valid_call(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    schema, call = case
    assert exact(schema_prepare(schema)(call)) == exact(call)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_prepare_gives_back_the_valid_call_a_provider_stringified(data: st.DataObject) -> None:
    schema, call = data.draw(valid_calls())
    sent = data.draw(stringified(schema, call, root=True))
    assert exact(schema_prepare(schema)(sent)) == exact(call)


# -- through call_tool: schema tools, function tools, kernos's own tools ---------------------------


async def test_a_schema_tool_runs_a_stringified_call_as_the_clean_call() -> None:
    received: list[dict[str, Any]] = []

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        received.append(args)
        return ToolResult(text="ok")

    schema = obj(
        {
            "stops": {"type": "array", "items": {"type": "string"}},
            "days": {"type": "integer"},
            "scenic": {"type": "boolean"},
            "separator": {"type": "string"},
            "label": {"type": "string"},
        },
        ["stops", "days"],
    )
    tool = schema_tool("route", "Plan a route.", schema, execute)
    raw = json.dumps(
        {
            "stops": '["Santa Barbara", "Monterey"]',
            "days": "3",
            "scenic": "True",
            "separator": " ",
            "label": "[draft]",
        }
    )
    result = await call_tool(tool, raw)
    assert not result.is_error, result.text
    assert received == [
        {
            "stops": ["Santa Barbara", "Monterey"],
            "days": 3,
            "scenic": True,
            "separator": " ",
            "label": "[draft]",
        }
    ]


def plan(stops: list[str], days: int, scenic: bool = False, label: str = "") -> str:
    """Plan a route.

    Args:
        stops: Where to stop.
        days: How many days.
        scenic: Prefer scenic roads.
        label: A free label.
    """
    return json.dumps([stops, days, scenic, label])


async def test_a_function_tool_reads_json_text_and_numeric_text_like_a_schema_tool() -> None:
    spec = function_tool(plan)
    result = await call_tool(
        spec, {"stops": '["a", "b"]', "days": "2", "scenic": "TRUE", "label": '["x"]'}
    )
    assert not result.is_error, result.text
    assert json.loads(result.text) == [["a", "b"], 2, True, '["x"]']


async def test_a_function_tool_keeps_text_that_spells_nothing_for_the_validator() -> None:
    result = await call_tool(function_tool(plan), {"stops": "a, b", "days": "two"})
    assert result.is_error
    assert result.code == "invalid_arguments"
    assert "`stops`" in result.text and "`days`" in result.text


def nested(rows: list[dict[str, int]], limit: int | None = None) -> str:
    """Rows."""
    return json.dumps([rows, limit])


async def test_function_tool_json_text_is_cleaned_by_its_own_schema() -> None:
    result = await call_tool(function_tool(nested), {"rows": '[{"a": "1"}]', "limit": "3"})
    assert not result.is_error, result.text
    assert json.loads(result.text) == [[{"a": 1}], 3]


async def test_a_built_in_tool_reads_numeric_text_too(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("one\ntwo\nthree\n")
    read = next(s for s in builtin_tools(LocalWorkspace([tmp_path])) if s.name == "read_file")
    result = await call_tool(read, {"path": "notes.txt", "offset": "2", "limit": "1"})
    assert not result.is_error, result.text
    assert "two" in result.text and "one" not in result.text and "three" not in result.text
