"""Reading an ``output_send__*`` call into items. Pure: no I/O, no clock.

One call may carry one message (``payload`` a string: the *single path*) or several (``payload`` an
array). ``type`` and ``meta`` pair with the payloads one to one, or broadcast when given once. Any
rejection raises :class:`OutputArgumentError` before a single item exists, so a bad call sends
nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kernos.boundary import identifier, is_blank, non_blank_text
from kernos.errors import OutputArgumentError as OutputArgumentError

#: The per-call item limit when the config does not set ``[output] max_items``.
DEFAULT_MAX_ITEMS = 20

#: The type an item has when the call names none.
DEFAULT_TYPE = "text"


@dataclass(frozen=True, slots=True)
class OutputItem:
    """One message: ``payload`` and ``type`` in the channel's own vocabulary, ``meta`` as text.

    The kernel never interprets ``type`` or ``meta``; ``meta`` objects arrive here already
    serialized to compact JSON text.
    """

    payload: str
    type: str = DEFAULT_TYPE
    meta: str | None = None


def _fail(code: str, message: str) -> OutputArgumentError:
    return OutputArgumentError(code, message + " Nothing was sent.")


def _payloads(payload: Any, max_items: int) -> list[str]:
    if isinstance(payload, str):
        if not payload.strip():
            raise _fail("missing_payload", "`payload` is blank; put the message text in it.")
        return [payload]
    if is_blank(payload) and not (isinstance(payload, list) and payload):
        raise _fail(
            "missing_payload",
            "`payload` is missing; give the message as a string, or several as an array of "
            "strings.",
        )
    if not isinstance(payload, list):
        raise _fail(
            "invalid_entry",
            f"`payload` must be a string or an array of strings, not {_json_kind(payload)}.",
        )
    if len(payload) > max_items:
        raise _fail(
            "too_many_items",
            f"`payload` has {len(payload)} entries; one call sends at most {max_items}. "
            "Split the messages over several calls.",
        )
    out: list[str] = []
    for number, entry in enumerate(payload, 1):
        if entry is None or (isinstance(entry, str) and not entry.strip()):
            raise _fail(
                "empty_entry",
                f"entry {number} of `payload` is empty; give it text or remove it.",
            )
        if not isinstance(entry, str):
            raise _fail(
                "invalid_entry",
                f"entry {number} of `payload` is {_json_kind(entry)}; every payload entry must be "
                "a string.",
            )
        out.append(entry)
    return out


def _types(value: Any) -> list[str] | None:
    if is_blank(value):
        return None  # "", [], null and an all-blank array are padding
    if not isinstance(value, list):
        if not isinstance(value, str):
            raise _fail(
                "invalid_entry",
                f"`type` must be a string or an array of strings, not {_json_kind(value)}.",
            )
        single = identifier(value)
        return None if single is None else [single]
    out: list[str] = []
    for number, entry in enumerate(value, 1):
        if entry is not None and not isinstance(entry, str):
            raise _fail(
                "invalid_entry",
                f"entry {number} of `type` is {_json_kind(entry)}; every type entry must be a "
                "string.",
            )
        cleaned = identifier(entry)
        if cleaned is None:
            raise _fail(
                "empty_entry",
                f"entry {number} of `type` is empty; give every entry a type, or pass one type "
                "for all messages.",
            )
        out.append(cleaned)
    return out


def _meta_entry(value: Any, where: str) -> str | None:
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")) if value else None
    if value is None or isinstance(value, str):
        return non_blank_text(value)
    raise _fail(
        "invalid_entry",
        f"{where} is {_json_kind(value)}; meta entries must be strings or JSON objects.",
    )


def _metas(value: Any) -> list[str | None] | None:
    if is_blank(value):
        return None
    if isinstance(value, list):
        return [_meta_entry(entry, f"entry {n} of `meta`") for n, entry in enumerate(value, 1)]
    return [_meta_entry(value, "`meta`")]


def _paired(
    name: str, values: list[Any], n: int, types: list[str] | None, metas: list[Any] | None
) -> list[Any]:
    if len(values) == n:
        return values
    if len(values) == 1:
        return values * n
    raise _fail(
        "length_mismatch",
        f"`payload` has {n} entries, `type` has {_count(types)} and `meta` has {_count(metas)}: "
        f"`{name}` must have 1 entry (used for every message) or {n} (one per message).",
    )


def parse_output_items(
    payload: Any,
    type: Any = None,
    meta: Any = None,
    *,
    max_items: int = DEFAULT_MAX_ITEMS,
) -> list[OutputItem]:
    """Turn a call's ``payload``/``type``/``meta`` into items, in order.

    Args:
        payload: a string (one item) or an array of N strings (N items).
        type: absent (``text``), a string or 1-entry array (broadcast), or N entries.
        meta: absent, a string/object or 1-entry array (broadcast), or N entries; objects become
            compact JSON text; a blank entry means no meta for that item.
        max_items: the per-call limit.

    Raises:
        OutputArgumentError: with ``code`` ``missing_payload``, ``empty_entry``,
            ``invalid_entry``, ``length_mismatch`` or ``too_many_items``.
    """
    payloads = _payloads(payload, max_items)
    types = _types(type)
    metas = _metas(meta)
    n = len(payloads)
    paired_types = [DEFAULT_TYPE] * n if types is None else _paired("type", types, n, types, metas)
    paired_metas: list[str | None] = (
        [None] * n if metas is None else _paired("meta", metas, n, types, metas)
    )
    return [
        OutputItem(p, t, m) for p, t, m in zip(payloads, paired_types, paired_metas, strict=True)
    ]


def _count(values: list[Any] | None) -> str:
    return "none (absent)" if values is None else str(len(values))


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"
