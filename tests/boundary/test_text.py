"""Text from a model is data: lone surrogates become U+FFFD, valid text stays byte-identical."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kernos.boundary import clean_json_text, clean_text, clean_value, nesting_depth


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


def test_lone_surrogates_escaped_in_json_text_become_replacement_escapes() -> None:
    assert clean_json_text('{"p": "nothing-\\udce9.txt"}') == '{"p": "nothing-\\ufffd.txt"}'
    assert clean_json_text('"\\uD800x\\ude00"') == '"\\ufffdx\\ufffd"'
    assert clean_json_text('"\\ud83d\\ud83d\\ude00"') == '"\\ufffd\\ud83d\\ude00"'  # pair kept
    assert clean_json_text('"raw \ud800"') == '"raw \ufffd"'
    kept = '"\\\\udce9 \\ud83d\\ude00 \\n \\u0041"'  # an escaped backslash, a pair, plain escapes
    assert clean_json_text(kept) is kept


_NEAR_SURROGATES = st.characters(codec=None, min_codepoint=0xD700, max_codepoint=0xE000)


@given(st.text(_NEAR_SURROGATES | st.sampled_from('a\\"\U0001f600')))
def test_json_text_always_decodes_to_encodable_strings(text: str) -> None:
    for dumped in (json.dumps({"k": text}), json.dumps([text], ensure_ascii=False)):
        decoded = json.loads(clean_json_text(dumped))
        json.dumps(decoded, ensure_ascii=False).encode("utf-8")


@given(st.text())
def test_clean_json_text_keeps_valid_json_text(text: str) -> None:
    dumped = json.dumps({"k": text})
    assert clean_json_text(dumped) is dumped
