"""Text from a model is data: cleaned of unencodable characters once, where it enters kernos.

A provider may send a lone UTF-16 surrogate (``"done \\ud800 ok"`` is valid JSON). Python keeps it
in a ``str``, and it then fails every UTF-8 encoder downstream: stdout, SQLite, the log, the next
request to the provider. Replacing it with U+FFFD where the text comes in means no later writer has
to know.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
# JSON escapes, matched left to right so that an escaped backslash before "udc00" is not
# taken for an escape: a surrogate pair (kept), a lone surrogate (group 1: replaced), any other
# escape (kept)
_JSON_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    r"|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})"
    r"|\\.",
    re.DOTALL,
)

REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD; valid text is returned as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(REPLACEMENT, text)
    return text


def clean_json_text(text: str) -> str:
    """JSON text (a tool call's arguments) cleaned of lone surrogates, written or escaped.

    A raw one becomes U+FFFD (:func:`clean_text`); an escaped one (``"\\udce9"``, valid JSON that
    decodes to a lone surrogate) becomes ``\\ufffd``, so the text decodes to clean strings
    wherever it is parsed again (a history sent back to the provider, a cassette, the store).
    Escaped pairs and every other escape are kept; clean text is returned as it is.
    """
    text = clean_text(text)
    if "\\ud" not in text and "\\uD" not in text:
        return text
    cleaned = _JSON_ESCAPE.sub(lambda m: "\\ufffd" if m.group(1) else m.group(0), text)
    return text if cleaned == text else cleaned


def clean_value(value: Any) -> Any:
    """:func:`clean_text` applied to every string in a JSON-shaped value, dict keys included.

    Lists and dicts are copied, other values kept. Iterative: no nesting depth makes it raise.
    """
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        container, key = stack.pop()
        item = container[key]
        if isinstance(item, str):
            container[key] = clean_text(item)
        elif isinstance(item, dict):
            copied = {clean_text(k) if isinstance(k, str) else k: v for k, v in item.items()}
            container[key] = copied
            stack.extend((copied, k) for k in copied)
        elif isinstance(item, list):
            listed = list(item)
            container[key] = listed
            stack.extend((listed, i) for i in range(len(listed)))
    return root[0]


def nesting_depth(value: Any, limit: int) -> int:
    """How deeply lists and dicts nest in ``value`` (a scalar is 0), counting no further than
    ``limit + 1``. Iterative, so a value nested 10,000 deep is measured without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth) for child in children)
    return deepest
