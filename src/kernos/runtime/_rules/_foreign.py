"""Text from tools kernos did not write reaches the model as delimited data, never as instructions.

A tool from an MCP server, a ``[tools.NAME]`` function or a ``kernos.tools`` plugin is marked with
its source (:func:`from_source`); every result it returns carries ``details["source"]``, and the
session's tool wrapper (:meth:`kernos.runtime._session._toolset.KernosToolset.invoke`) hands the
model its text inside ``<tool-result source="mcp:git" nonce="N">`` … ``</tool-result-N>``
(:func:`delimit`). The nonce is random per call and absent from the text, so a closing tag inside
the text cannot end the block early (as ``kernos compress`` quotes its source:
``kernos.compress._turns``). The session's system prompt then says, once, what such a block is
(``tool_results.md``).

kernos's own tools (workspace, task, output, compress) are not marked, and the errors kernos itself
writes for a marked tool (a bad argument, a server that is not running) carry ``"source":
"kernos"``: neither is delimited.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import weakref
from collections.abc import Callable, Iterable
from functools import cache
from importlib import resources
from typing import Any

from kernos.boundary import ToolContext, ToolResult, ToolSpec

#: ``details["source"]`` of a result kernos wrote itself for a marked tool: not delimited
KERNOS_SOURCE = "kernos"

_OPENING = re.compile(r'<tool-result source="[^"\n]*" nonce="[0-9a-f]+">\n')
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")

#: the execute wrapper of each marked tool → its source
_SOURCES: weakref.WeakKeyDictionary[Callable[..., Any], str] = weakref.WeakKeyDictionary()


def new_nonce(text: str, token: Callable[[], str] = lambda: secrets.token_hex(4)) -> str:
    """A random 8-hex nonce that does not occur in ``text`` (so its closing tag cannot either)."""
    while True:
        nonce = token()
        if nonce not in text:
            return nonce


def delimit(text: str, source: str, nonce: str) -> str:
    """``text`` inside the data delimiter naming ``source``; only ``</tool-result-NONCE>`` ends
    it."""
    shown = _UNSAFE.sub("_", source)
    end = "" if text.endswith("\n") or not text else "\n"
    return f'<tool-result source="{shown}" nonce="{nonce}">\n{text}{end}</tool-result-{nonce}>'


def delimited(result: ToolResult) -> ToolResult:
    """``result`` as the model reads it: delimited when it carries a source other than kernos."""
    source = result.details.get("source")
    if not isinstance(source, str) or source == KERNOS_SOURCE:
        return result
    return dataclasses.replace(result, text=delimit(result.text, source, new_nonce(result.text)))


def match_text(text: str) -> str:
    """What a recorded cassette turn matches on for ``text``: a delimited result's own text,
    without its random nonce (so a recording replays although each run draws new nonces)."""
    opening = _OPENING.match(text)
    if opening is None:
        return text
    inner = text[opening.end() :]
    return inner.split("</tool-result-", 1)[0].split("<tool-result ", 1)[0].removesuffix("\n")


def from_source(spec: ToolSpec[Any], source: str) -> ToolSpec[Any]:
    """``spec`` as a tool kernos did not write, from ``source`` (``mcp:git``, ``function:NAME``,
    ``plugin:NAME``): each result its ``execute`` returns carries ``details["source"]`` (unless
    it already names one, such as :data:`KERNOS_SOURCE` for kernos's own error text)."""
    if tool_source(spec) is not None:
        return spec
    inner = spec.execute

    async def execute(params: Any, ctx: ToolContext) -> ToolResult:
        outcome = await inner(params, ctx)
        result = ToolResult(text=outcome) if isinstance(outcome, str) else outcome
        if "source" in result.details:
            return result
        return dataclasses.replace(result, details={**result.details, "source": source})

    _SOURCES[execute] = source
    return dataclasses.replace(spec, execute=execute)


def rewrapped(spec: ToolSpec[Any], execute: Callable[..., Any]) -> ToolSpec[Any]:
    """``spec`` with ``execute`` (which calls the old one) in its place, from the same source:
    a wrapper of a foreign tool keeps it foreign (its results delimited, the system prompt's
    note about them kept)."""
    source = tool_source(spec)
    if source is not None:
        _SOURCES[execute] = source
    return dataclasses.replace(spec, execute=execute)


def tool_source(spec: ToolSpec[Any]) -> str | None:
    """Where a tool marked by :func:`from_source` comes from; ``None`` for kernos's own."""
    return _SOURCES.get(spec.execute)


def has_foreign_tools(specs: Iterable[ToolSpec[Any]]) -> bool:
    """Whether any of ``specs`` is a tool kernos did not write."""
    return any(tool_source(spec) is not None for spec in specs)


@cache
def tool_results_note() -> str:
    """The system prompt's sentence about delimited tool results (``tool_results.md``)."""
    return (
        resources.files("kernos.runtime._rules")
        .joinpath("tool_results.md")
        .read_text("utf-8")
        .strip()
    )
