"""The prepare derived from a JSON schema, and validation on kernos's side."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernos.boundary import ToolContext, ToolResult, call_tool, schema_prepare, schema_tool


def one(prop: dict[str, Any], value: Any, *, required: bool = False) -> dict[str, Any]:
    """Prepare ``{"x": value}`` against a schema whose only property ``x`` is ``prop``."""
    schema = {"type": "object", "properties": {"x": prop}, "required": ["x"] if required else []}
    return schema_prepare(schema)({"x": value})


# -- the table, row by row -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "prop",
    [{"type": "string"}, {"type": "integer"}, {"type": "array"}, {"enum": ["a", "b"]}],
)
def test_null_where_null_is_not_allowed_becomes_absent(prop: dict[str, Any]) -> None:
    assert one(prop, None) == {}


@pytest.mark.parametrize(
    "prop",
    [
        {"type": ["string", "null"]},
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
        {"oneOf": [{"type": "integer"}, {"type": "null"}]},
        {"type": "string", "nullable": True},
        {"enum": ["a", None]},
        {"description": "no type at all"},
    ],
)
def test_null_where_the_schema_allows_it_is_kept(prop: dict[str, Any]) -> None:
    assert one(prop, None) == {"x": None}


def test_empty_string_becomes_absent() -> None:
    assert one({"type": "string"}, "") == {}
    assert one({"type": "integer"}, "") == {}


@pytest.mark.parametrize("value", [" ", "\t\n ", "\n"])
def test_whitespace_only_text_is_a_value(value: str) -> None:
    assert one({"type": "string"}, value) == {"x": value}
    assert one({"type": "string"}, value, required=True) == {"x": value}


def test_blank_string_listed_in_the_enum_is_a_value() -> None:
    assert one({"type": "string", "enum": ["", "a"]}, "") == {"x": ""}


@pytest.mark.parametrize(
    ("prop", "value"),
    [
        ({"type": "array", "items": {"type": "string"}}, []),
        ({"type": "object", "properties": {"a": {"type": "string"}}}, {}),
        ({"type": "object"}, {}),
    ],
)
def test_empty_array_or_object_becomes_absent(prop: dict[str, Any], value: Any) -> None:
    assert one(prop, value) == {}


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("FALSE", False), (" True ", True), ("False", False)]
)
def test_boolean_words_become_booleans(value: str, expected: bool) -> None:
    assert one({"type": "boolean"}, value) == {"x": expected}


def test_other_words_for_a_boolean_are_left_for_the_validator() -> None:
    assert one({"type": "boolean"}, "yes") == {"x": "yes"}


@pytest.mark.parametrize(
    ("prop", "value", "expected"),
    [
        ({"type": "integer"}, "5", 5),
        ({"type": "integer"}, " -3 ", -3),
        ({"type": "integer"}, "4.0", 4),
        ({"type": "number"}, "2.5", 2.5),
        ({"type": "number"}, "7", 7),
        ({"type": "number"}, "1e3", 1000.0),
        ({"type": ["integer", "null"]}, "12", 12),
    ],
)
def test_numeric_strings_become_numbers(prop: dict[str, Any], value: str, expected: Any) -> None:
    result = one(prop, value)
    assert result == {"x": expected}
    assert type(result["x"]) is type(expected)


@pytest.mark.parametrize(
    ("prop", "value"),
    [({"type": "integer"}, "5.5"), ({"type": "integer"}, "five"), ({"type": "number"}, "inf")],
)
def test_non_numbers_are_left_for_the_validator(prop: dict[str, Any], value: str) -> None:
    assert one(prop, value) == {"x": value}


def test_a_string_property_keeps_numeric_and_boolean_words() -> None:
    assert one({"type": "string"}, "5") == {"x": "5"}
    assert one({"type": "string"}, "true") == {"x": "true"}


@pytest.mark.parametrize("word", ["null", "None", "UNDEFINED", " none "])
def test_null_words_rejected_by_enum_or_pattern_become_absent(word: str) -> None:
    assert one({"type": "string", "enum": ["fast", "full"]}, word) == {}
    assert one({"type": "string", "pattern": "^[0-9]+$"}, word) == {}


def test_null_words_a_string_property_could_mean_are_kept() -> None:
    assert one({"type": "string"}, "None") == {"x": "None"}  # a name, a title: a value
    assert one({"type": "string", "pattern": "^[a-z]+$"}, "none") == {"x": "none"}
    assert one({"type": "string", "enum": ["none", "all"]}, "none") == {"x": "none"}


def test_keys_the_schema_forbids_are_dropped() -> None:
    closed = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert schema_prepare({**closed, "additionalProperties": False})({"a": "1", "zz": 2}) == {
        "a": "1"
    }
    assert schema_prepare(closed)({"a": "1", "zz": 2}) == {"a": "1", "zz": 2}
    allowed = {**closed, "additionalProperties": False, "patternProperties": {"^x-": {}}}
    assert schema_prepare(allowed)({"x-trace": "t", "zz": 2}) == {"x-trace": "t"}


def test_undeclared_keys_holding_padding_are_dropped() -> None:
    prepare = schema_prepare({"type": "object", "properties": {}})
    assert prepare({"extra": "", "more": None, "list": [], "kept": "v"}) == {"kept": "v"}


# -- required, nesting, references -----------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "  ", [], {}, "null", "true", "5"])
def test_required_values_are_never_stripped(value: Any) -> None:
    for prop in (
        {"type": "string", "enum": ["a"]},
        {"type": "integer"},
        {"type": "boolean"},
        {"type": "array"},
    ):
        expected = value
        if value == "true" and prop["type"] == "boolean":
            expected = True
        elif value == "5" and prop["type"] == "integer":
            expected = 5
        assert one(prop, value, required=True) == {"x": expected}


NESTED = {
    "type": "object",
    "properties": {
        "filter": {
            "type": "object",
            "properties": {"field": {"type": "string"}, "op": {"type": "string"}},
            "required": ["field"],
            "additionalProperties": False,
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "label": {"type": "string"}},
                "required": ["id"],
            },
        },
    },
    "required": ["items"],
}


def test_nested_objects_and_arrays_of_objects_recurse_with_their_own_required() -> None:
    prepare = schema_prepare(NESTED)
    raw = {
        "filter": {"field": "", "op": "", "junk": 1},
        "items": [{"id": "", "label": ""}, {"id": 2, "label": "two"}, "odd"],
    }
    assert prepare(raw) == {
        "filter": {"field": ""},
        "items": [{"id": ""}, {"id": 2, "label": "two"}, "odd"],
    }


def test_an_optional_object_holding_only_padding_becomes_absent() -> None:
    prepare = schema_prepare(NESTED)
    assert prepare({"items": [], "filter": {"op": ""}}) == {"items": []}


def test_local_refs_and_defs_are_followed_even_when_recursive() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["name"],
            },
            "Limit": {"type": "integer"},
        },
        "properties": {"root": {"$ref": "#/$defs/Node"}, "limit": {"$ref": "#/$defs/Limit"}},
    }
    raw = {"root": {"name": "a", "children": [{"name": "b", "children": []}]}, "limit": "3"}
    assert schema_prepare(schema)(raw) == {
        "root": {"name": "a", "children": [{"name": "b"}]},
        "limit": 3,
    }


def test_all_of_merges_properties_and_required() -> None:
    schema = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "boolean"}}},
        ]
    }
    assert schema_prepare(schema)({"a": "", "b": "true"}) == {"a": "", "b": True}


@pytest.mark.parametrize(
    "schema",
    [
        {},
        {"type": "object", "properties": None},
        {"type": "object", "properties": {"a": "not a schema", "b": True}},
        {"properties": {"a": {"$ref": "https://example.com/remote"}}},
        {"properties": {"a": {"$ref": "#/nowhere"}}, "required": "a"},
        {"properties": {"a": {"type": "string", "pattern": "(unclosed"}}},
        {"properties": {"a": {"anyOf": "x"}}, "patternProperties": {"(": {}}},
        {"properties": {"a": {"$ref": "#/properties/a"}}},
    ],
)
def test_odd_schemas_never_raise(schema: dict[str, Any]) -> None:
    prepare = schema_prepare(schema)
    assert prepare({"a": None, "b": ""}) is not None
    assert prepare("not a dict") == {}
    assert prepare(None) == {}


# -- schema_tool: validation before execute --------------------------------------------------------


def recording_tool(schema: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    received: list[dict[str, Any]] = []

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        received.append(args)
        return ToolResult(text="ok")

    return schema_tool("lookup", "Look it up.", schema, execute), received


async def test_schema_tool_shows_the_schema_and_hands_execute_the_prepared_dict() -> None:
    tool, received = recording_tool(NESTED)
    assert tool.schema() == NESTED
    result = await call_tool(tool, '{"items": [{"id": 1, "label": ""}], "filter": {}}')
    assert (result.is_error, received) == (False, [{"items": [{"id": 1}]}])


async def test_a_bad_call_names_each_field_and_never_reaches_execute() -> None:
    tool, received = recording_tool(NESTED)
    result = await call_tool(
        tool, {"items": [{"label": "no id"}, {"id": "x"}], "filter": {"op": "eq"}}
    )
    assert received == []
    assert result.code == "invalid_arguments"
    assert result.stage == "schema"
    assert result.text == (
        "Invalid arguments for tool `lookup`:\n"
        "- `filter.field`: required field is missing; add it.\n"
        "- `items[0].id`: required field is missing; add it.\n"
        "- `items[1].id`: 'x' is not of type 'integer' (got \"x\").\n"
        "Fix these fields and call `lookup` again."
    )
    assert [e["loc"] for e in result.details["errors"]] == [
        ["filter", "field"],
        ["items", 0, "id"],
        ["items", 1, "id"],
    ]


async def test_a_missing_required_field_is_named() -> None:
    tool, received = recording_tool(NESTED)
    result = await call_tool(tool, {})
    assert received == []
    assert "- `items`: required field is missing; add it." in result.text


async def test_an_invalid_schema_does_not_block_calls() -> None:
    tool, received = recording_tool({"type": "object", "properties": {"a": {"type": 5}}})
    result = await call_tool(tool, {"a": 1})
    assert (result.is_error, received) == (False, [{"a": 1}])


# -- the property: required fields kept, padding never let through --------------------------------

# (schema for the property, padding values for it, a legitimate value)
LEAVES: list[tuple[dict[str, Any], list[Any], Any]] = [
    ({"type": "string"}, [""], "abc"),
    ({"type": "string", "enum": ["fast", "full"]}, ["", "null", "None", "undefined"], "full"),
    ({"type": "string", "pattern": "^[0-9]+$"}, ["", "null", " none "], "123"),
    ({"type": "integer"}, [None, "", "null"], 3),
    ({"type": "number"}, [None, "", "undefined"], 1.5),
    ({"type": "boolean"}, [None, ""], False),
    ({"type": "array", "items": {"type": "string"}}, [None, []], ["x"]),
    ({"type": "object"}, [None, {}], {"k": "v"}),
    ({"anyOf": [{"type": "integer"}, {"type": "string", "enum": ["all"]}]}, [None, ""], "all"),
]

names = st.sampled_from(["a", "b", "c", "d", "e", "f"])


@st.composite
def object_schemas(draw: st.DrawFn, depth: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """An object schema, and per property what the test may send (padding, legit value)."""
    keys = draw(st.lists(names, unique=True, max_size=5))
    props: dict[str, Any] = {}
    plans: dict[str, Any] = {}
    for key in keys:
        if depth < 2 and draw(st.integers(0, 4)) == 0:
            sub_schema, sub_plans = draw(object_schemas(depth + 1))
            props[key] = sub_schema
            plans[key] = ("object", sub_plans)
        else:
            schema, padding, legit = draw(st.sampled_from(LEAVES))
            props[key] = schema
            plans[key] = ("leaf", padding, legit)
    required = draw(st.lists(st.sampled_from(keys), unique=True)) if keys else []
    closed = draw(st.booleans())
    schema = {"type": "object", "properties": props, "required": required}
    if closed:
        schema["additionalProperties"] = False
    return schema, {"plans": plans, "required": set(required), "closed": closed}


@st.composite
def padded_calls(draw: st.DrawFn, shape: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A raw call and what prepare must make of it (``ABSENT`` where the key must be gone)."""
    raw: dict[str, Any] = {}
    expected: dict[str, Any] = {}
    for key, plan in shape["plans"].items():
        required = key in shape["required"]
        choice = draw(st.sampled_from(["omit", "pad", "legit"]))
        if choice == "omit":
            continue
        if plan[0] == "object":
            if choice == "pad":
                value = draw(st.sampled_from([None, {}]))
                raw[key] = value
                if required:
                    expected[key] = value
            else:
                sub_raw, sub_expected = draw(padded_calls(plan[1]))
                raw[key] = sub_raw
                if required or sub_expected:
                    expected[key] = sub_expected
            continue
        _, padding, legit = plan
        value = draw(st.sampled_from(padding)) if choice == "pad" else legit
        raw[key] = value
        if required or choice == "legit":
            expected[key] = value
    if draw(st.booleans()):
        raw["unknown_key"] = draw(st.sampled_from(["", None, "kept?"]))
        if raw["unknown_key"] == "kept?" and not shape["closed"]:
            expected["unknown_key"] = "kept?"
    return raw, expected


@st.composite
def schema_and_call(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    schema, shape = draw(object_schemas())
    raw, expected = draw(padded_calls(shape))
    return schema, raw, expected


@settings(max_examples=300, deadline=None)
@given(schema_and_call())
def test_prepare_keeps_required_fields_and_lets_no_padding_through(
    case: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
) -> None:
    schema, raw, expected = case
    assert schema_prepare(schema)(raw) == expected


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=12,
    ),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=12,
    ),
)
def test_any_schema_shape_and_any_value_never_raise(schema: Any, raw: Any) -> None:
    prepared = schema_prepare(schema if isinstance(schema, dict) else {"x": schema})(raw)
    assert isinstance(prepared, dict)
