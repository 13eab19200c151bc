"""Bounds on what an MCP server sends: a result's size, a tool schema's size and depth.

Pure rules over text and JSON values; :mod:`kernos.tools._mcp` applies them before anything a
server sent reaches a model request or the store.
"""

from __future__ import annotations

import json
from typing import Any

from kernos.boundary import nesting_depth

#: a tool whose input schema serializes to more than this many bytes is left out
MAX_SCHEMA_BYTES = 64 * 1024
#: a tool whose input schema nests objects and arrays deeper than this is left out
MAX_SCHEMA_DEPTH = 32


def cut_text(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to its first ``limit`` UTF-8 bytes, with a marker saying how much was dropped
    and how to get less; returns the text and the number of bytes dropped (0: not cut)."""
    if len(text) * 4 <= limit:  # no character takes more than 4 bytes: cannot be over
        return text, 0
    data = text.encode("utf-8", errors="surrogatepass")
    if len(data) <= limit:
        return text, 0
    kept = data[:limit].decode("utf-8", errors="ignore")  # a character cut in half goes
    dropped = len(data) - len(kept.encode("utf-8", errors="surrogatepass"))
    marker = (
        f"[result cut: {dropped:,} of {len(data):,} bytes dropped; ask the tool for less: "
        "a narrower query, a page, a limit]"
    )
    return f"{kept}\n{marker}", dropped


def schema_problem(
    schema: Any, *, max_bytes: int = MAX_SCHEMA_BYTES, max_depth: int = MAX_SCHEMA_DEPTH
) -> str | None:
    """Why a tool's input schema is too big to offer a model, or ``None`` when it is not."""
    if nesting_depth(schema, max_depth) > max_depth:
        return f"its input schema nests deeper than {max_depth} levels"
    size = len(json.dumps(schema, ensure_ascii=False, default=str).encode("utf-8", "replace"))
    if size > max_bytes:
        return f"its input schema is {size:,} bytes, over the {max_bytes:,}-byte limit"
    return None
