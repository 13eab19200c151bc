"""Parsing is pure; the single path is unchanged; every rejection has a code."""

# ruff: noqa: E501  (snapshots hold model-facing text verbatim, one line per line)

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from inline_snapshot import snapshot

from kernos.output import OutputArgumentError, OutputItem, parse_output_items


def code_of(payload: Any, type: Any = None, meta: Any = None, **kw: Any) -> str:
    with pytest.raises(OutputArgumentError) as caught:
        parse_output_items(payload, type, meta, **kw)
    return caught.value.code


def test_string_payload_is_one_text_item() -> None:
    assert parse_output_items("hi") == [OutputItem("hi", "text", None)]


def test_string_payload_is_kept_verbatim() -> None:
    assert parse_output_items("  spaced \n") == [OutputItem("  spaced \n")]


def test_array_gives_items_in_order_with_types_paired() -> None:
    items = parse_output_items(["a", "b", "c"], ["text", "image", "sticker"])
    assert items == [
        OutputItem("a", "text"),
        OutputItem("b", "image"),
        OutputItem("c", "sticker"),
    ]


@pytest.mark.parametrize("type_", ["image", ["image"], " image "])
def test_one_type_is_broadcast(type_: Any) -> None:
    assert [i.type for i in parse_output_items(["a", "b"], type_)] == ["image", "image"]


@pytest.mark.parametrize("meta", ['{"group_id": 1}', ['{"group_id": 1}']])
def test_one_meta_is_broadcast(meta: Any) -> None:
    assert [i.meta for i in parse_output_items(["a", "b", "c"], None, meta)] == [
        '{"group_id": 1}'
    ] * 3


def test_meta_objects_become_compact_json_text() -> None:
    items = parse_output_items(["a", "b"], None, [{"user_id": 7}, {"名": "字"}])
    assert [i.meta for i in items] == ['{"user_id":7}', '{"名":"字"}']


def test_blank_meta_entry_means_no_meta_for_that_item() -> None:
    items = parse_output_items(["a", "b"], None, ['{"x":1}', ""])
    assert [i.meta for i in items] == ['{"x":1}', None]


@pytest.mark.parametrize("padding", [None, "", [], "   ", [""], "null"])
def test_padded_type_is_absent(padding: Any) -> None:
    assert [i.type for i in parse_output_items(["a", "b"], padding)] == ["text", "text"]


@pytest.mark.parametrize("padding", [None, "", [], {}, [None, ""]])
def test_padded_meta_is_absent(padding: Any) -> None:
    assert [i.meta for i in parse_output_items(["a", "b"], None, padding)] == [None, None]


@pytest.mark.parametrize("payload", [None, "", "  ", [], {}])
def test_missing_payload(payload: Any) -> None:
    assert code_of(payload) == "missing_payload"


@pytest.mark.parametrize(
    ("payload", "type_"),
    [(["a", ""], None), (["a", None], None), (["", ""], None), (["a", "b"], ["text", " "])],
)
def test_empty_entries_reject(payload: Any, type_: Any) -> None:
    assert code_of(payload, type_) == "empty_entry"


@pytest.mark.parametrize(
    ("payload", "type_", "meta"),
    [
        (5, None, None),
        ({"text": "hi"}, None, None),
        (["a", 1], None, None),
        (["a", {"text": "b"}], None, None),
        (["a"], [3], None),
        (["a"], 3, None),
        (["a"], None, 7),
        (["a", "b"], None, ["x", 7]),
    ],
)
def test_wrong_json_types_reject(payload: Any, type_: Any, meta: Any) -> None:
    assert code_of(payload, type_, meta) == "invalid_entry"


@pytest.mark.parametrize(
    ("type_", "meta"),
    [(["t", "u"], None), (None, ["m", "n"]), (["t", "u", "v", "w"], None), ("t", ["a", "b"])],
)
def test_lengths_neither_one_nor_n_reject(type_: Any, meta: Any) -> None:
    assert code_of(["a", "b", "c"], type_, meta) == "length_mismatch"


def test_string_payload_with_two_types_is_a_mismatch() -> None:
    assert code_of("a", ["text", "image"]) == "length_mismatch"


def test_too_many_items() -> None:
    assert code_of(["x"] * 21) == "too_many_items"
    assert code_of(["x"] * 4, max_items=3) == "too_many_items"
    assert len(parse_output_items(["x"] * 20)) == 20


def test_rejection_messages() -> None:
    def message(*args: Any) -> str:
        with pytest.raises(OutputArgumentError) as caught:
            parse_output_items(*args)
        return caught.value.message

    assert message(["a", "b", "c"], ["text", "image"]) == snapshot(
        "`payload` has 3 entries, `type` has 2 and `meta` has none (absent): `type` must have 1 entry (used for every message) or 3 (one per message). Nothing was sent."
    )
    assert message(["a", "", "c"]) == snapshot(
        "entry 2 of `payload` is empty; give it text or remove it. Nothing was sent."
    )
    assert message(["a", "b"], ["text", ""]) == snapshot(
        "entry 2 of `type` is empty; give every entry a type, or pass one type for all messages. Nothing was sent."
    )
    assert message([]) == snapshot(
        "`payload` is missing; give the message as a string, or several as an array of strings. Nothing was sent."
    )


# -- properties -----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
CODES = {"missing_payload", "empty_entry", "invalid_entry", "length_mismatch", "too_many_items"}


@given(json_values, json_values, json_values)
def test_any_input_parses_or_rejects_with_a_code(payload: Any, type_: Any, meta: Any) -> None:
    try:
        items = parse_output_items(payload, type_, meta)
    except OutputArgumentError as exc:
        assert exc.code in CODES
        assert exc.message.endswith("Nothing was sent.")
    else:
        assert items
        assert all(i.payload.strip() and i.type.strip() for i in items)
        if isinstance(payload, str):
            assert [i.payload for i in items] == [payload]
        else:
            assert [i.payload for i in items] == payload


@given(st.lists(st.text(min_size=1).filter(str.strip), min_size=1, max_size=20), st.data())
def test_paired_arrays_keep_order(payloads: list[str], data: st.DataObject) -> None:
    types = data.draw(
        st.lists(
            st.text(min_size=1).filter(
                lambda s: s.strip() and s.strip().casefold() not in {"null", "none", "undefined"}
            ),
            min_size=len(payloads),
            max_size=len(payloads),
        )
    )
    items = parse_output_items(payloads, types)
    assert [(i.payload, i.type) for i in items] == list(
        zip(payloads, [t.strip() for t in types], strict=True)
    )
