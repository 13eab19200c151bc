"""Text from a model is data: lone surrogates become U+FFFD, valid text stays byte-identical."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kernos.boundary import clean_text, clean_value, nesting_depth


def test_lone_surrogates_become_replacement_characters() -> None:
    assert clean_text("done \ud800 ok") == "done \ufffd ok"
    assert clean_text("\udfff\ud83d") == "\ufffd\ufffd"
    assert clean_text("done \ud800 ok").encode("utf-8") == b"done \xef\xbf\xbd ok"


@given(st.text())
def test_valid_text_is_returned_unchanged(text: str) -> None:
    # hypothesis' text() never draws surrogates: every such string is valid
    assert clean_text(text) is text


@given(st.text(st.characters(codec=None, min_codepoint=0xD700, max_codepoint=0xE000)))
def test_cleaned_text_always_encodes(text: str) -> None:
    cleaned = clean_text(text)
    cleaned.encode("utf-8")
    assert len(cleaned) == len(text)


def test_every_string_of_a_value_is_cleaned_keys_included() -> None:
    raw = {"a\ud800": ["x\udc00", {"k": "\ud800"}, 3, None], "ok": "fine"}
    assert clean_value(raw) == {"a\ufffd": ["x\ufffd", {"k": "\ufffd"}, 3, None], "ok": "fine"}
    assert raw["a\ud800"][0] == "x\udc00"  # the input is not modified


def test_deep_values_are_walked_without_recursion() -> None:
    value: Any = "\ud800"
    for _ in range(10_000):
        value = [value]
    assert nesting_depth(value, 100) == 101  # stops counting past the limit
    assert nesting_depth(value, 20_000) == 10_000
    cleaned = clean_value(value)
    for _ in range(10_000):
        cleaned = cleaned[0]
    assert cleaned == "\ufffd"
    assert [nesting_depth(v, 5) for v in ("s", [], {}, {"a": [1]}, [[], [[]]])] == [0, 1, 1, 2, 3]
