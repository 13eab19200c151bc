"""The padding table, one test per row."""

from __future__ import annotations

import pytest

from kernos.boundary import (
    boolean_flag,
    identifier,
    is_blank,
    is_padding_word,
    non_blank_text,
    string_list,
    strip_padding,
)


@pytest.mark.parametrize("value", [None, "", "   ", "\n\t "])
def test_null_empty_and_whitespace_are_absent(value: object) -> None:
    assert non_blank_text(value) is None
    assert identifier(value) is None
    assert string_list(value) is None
    assert boolean_flag(value) is None


@pytest.mark.parametrize("value", [[], {}])
def test_empty_containers_are_absent(value: object) -> None:
    assert is_blank(value)
    assert string_list(value) is None
    assert strip_padding({"field": value}) == {}


def test_all_blank_list_is_absent_and_blank_entries_dropped_elsewhere() -> None:
    assert string_list(["", "  ", None]) is None
    assert is_blank(["", " "])
    assert string_list(["", "audit", "  ", "review "]) == ["audit", "review"]


@pytest.mark.parametrize("word", ["null", "NULL", " None ", "undefined", "Undefined"])
def test_null_words_in_identifier_fields_are_absent(word: str) -> None:
    assert is_padding_word(word)
    assert identifier(word) is None
    assert string_list([word, "explore"]) == ["explore"]


def test_null_words_are_text_in_text_fields() -> None:
    # a prompt that says "none" is a real prompt; only identifier fields treat it as padding
    assert non_blank_text("none") == "none"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("TRUE", True), (" False ", False), (True, True), (False, False)],
)
def test_boolean_strings_are_coerced(value: object, expected: bool) -> None:
    assert boolean_flag(value) is expected


@pytest.mark.parametrize("value", ["yes", "1", 1, 0, [], "unused", {"a": 1}])
def test_other_non_booleans_are_absent(value: object) -> None:
    assert boolean_flag(value) is None


def test_zero_and_false_are_values_not_padding() -> None:
    assert not is_blank(0)
    assert not is_blank(False)
    assert strip_padding({"count": 0, "flag": False}) == {"count": 0, "flag": False}
    assert boolean_flag(False) is False


def test_required_fields_are_never_stripped() -> None:
    assert strip_padding({"payload": "", "type": ""}, keep=frozenset({"payload"})) == {
        "payload": ""
    }


def test_text_is_verbatim_identifiers_are_trimmed() -> None:
    assert non_blank_text("  keep my spacing \n") == "  keep my spacing \n"
    assert identifier("  explore \n") == "explore"


def test_padding_words_are_configurable_per_tool() -> None:
    words = frozenset({"unused", "n/a"})
    assert is_padding_word(" Unused ", words)
    assert not is_padding_word("null", words)
    assert not is_padding_word(3, words)
