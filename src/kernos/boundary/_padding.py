"""Padding rules shared by every tool.

GPT-style serializers fill every optional field: ``""``, ``[]``, ``{}``, ``null``, ``"null"``.
Each helper turns such padding into ``None`` ("absent") and returns the cleaned value otherwise.
They are pure and never raise: an odd shape is treated as padding, not as an error, because the
schema step that follows is where a *required* field's absence becomes a coded error.

They run on every tool call, so they are written for speed: plain ``isinstance`` checks against
types or tuples of types (a ``list | tuple`` union is rebuilt on each call and checked more slowly),
loops instead of generators, and no intermediate lists.
"""

from __future__ import annotations

import json
from typing import Any

#: Strings that mean "nothing" when a model puts them in an identifier field.
NULL_WORDS = frozenset({"null", "none", "undefined"})

_SEQUENCES = (list, tuple)


def is_padding_word(value: Any, words: frozenset[str] | set[str] = NULL_WORDS) -> bool:
    """True when ``value`` is a string equal to one of ``words`` (trimmed, any case)."""
    return isinstance(value, str) and value.strip().casefold() in words


def is_blank(value: Any) -> bool:
    """True for ``None``, blank strings, empty containers and lists of blank entries.

    ``0`` and ``False`` are values, not padding.
    """
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, dict):
        return not value
    if isinstance(value, _SEQUENCES):
        for entry in value:  # noqa: SIM110 (all() over a generator is slower here)
            if not is_blank(entry):
                return False
        return True
    return False


def non_blank_text(value: Any) -> str | None:
    """A text field (prompt, payload): kept verbatim when not blank, else absent."""
    if isinstance(value, str) and value.strip():
        return value
    return None


def identifier(value: Any) -> str | None:
    """An identifier field (name, category, model): trimmed; blank or a null word → absent."""
    if not isinstance(value, str):
        return None
    cleaned = value.strip()
    if not cleaned or cleaned.casefold() in NULL_WORDS:
        return None
    return cleaned


def string_list(value: Any) -> list[str] | None:
    """A list of identifiers: blank, null-word and non-string entries dropped; empty → absent.

    A bare non-blank string is read as a one-entry list, which is what a model meant by it; a
    string holding a JSON array (``"[]"``, ``'["read"]'``, some serializers send lists so) is
    read as the array it encodes.
    """
    if isinstance(value, str):
        decoded = _json_array(value)
        value = [value] if decoded is None else decoded
    elif not isinstance(value, _SEQUENCES):
        return None
    cleaned: list[str] = []
    for entry in value:
        name = identifier(entry)
        if name is not None:
            cleaned.append(name)
    return cleaned or None


def _json_array(text: str) -> list[Any] | None:
    """The list a ``[...]`` JSON text encodes; ``None`` for any other text (never raises)."""
    stripped = text.strip()
    if not (stripped.startswith("[") and stripped.endswith("]")):
        return None
    try:
        decoded = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, list) else None


def boolean_flag(value: Any) -> bool | None:
    """A boolean field: booleans kept, ``"true"``/``"false"`` (any case) coerced, else absent."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().casefold()
        if word == "true":
            return True
        if word == "false":
            return False
    return None


def strip_padding(raw: dict[str, Any], *, keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Drop blank optional values from a top-level argument dict; ``keep`` names required fields."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in keep or not is_blank(value):
            out[key] = value
    return out
