"""Which tools an agent gets: pure rules over names, no I/O.

An agent's ``tools`` lists names or globs (``read_file``, ``git__*``, ``docs__{search,fetch}``);
no ``tools`` key means the built-in workspace tools, ``[]`` means none.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from wcmatch import fnmatch as wcfnmatch

from kernos.boundary import ToolSpec
from kernos.runtime import (
    CLAUDE_CODE_TOOL_MAP,
    claude_tool_equivalent,
    claude_tool_instead,
    is_claude_tool,
)

_FLAGS = wcfnmatch.BRACE

#: Claude Code's tool names (case-folded) and what kernos calls them (``None``: no built-in
#: equivalent); the table itself is ``kernos.runtime.CLAUDE_CODE_TOOL_MAP``
CLAUDE_CODE_TOOLS: dict[str, str | None] = {
    name.casefold(): kernos for name, kernos in CLAUDE_CODE_TOOL_MAP.items()
}


def is_glob(pattern: str) -> bool:
    """True when ``pattern`` has glob characters (``*``, ``?``, ``[``, ``{``)."""
    return any(c in pattern for c in "*?[{")


def matches(pattern: str, name: str) -> bool:
    """Whether a tool ``name`` is selected by ``pattern`` (exact name or glob, case-sensitive)."""
    if not is_glob(pattern):
        return pattern == name
    return bool(wcfnmatch.fnmatch(name, pattern, flags=_FLAGS))


def select_tools(
    patterns: Sequence[str] | None,
    available: Iterable[ToolSpec[Any]],
    *,
    defaults: Collection[str] = (),
) -> list[ToolSpec[Any]]:
    """The tools ``patterns`` select from ``available``, in pattern order, each once.

    Args:
        patterns: the agent's ``tools``; ``None`` (no key) selects ``defaults``.
        available: every tool the sources offer.
        defaults: the names an agent without a ``tools`` key gets.
    """
    specs = list(available)
    if patterns is None:
        return [s for s in specs if s.name in defaults]
    chosen: dict[str, ToolSpec[Any]] = {}
    for pattern in patterns:
        for spec in sorted(specs, key=lambda s: s.name) if is_glob(pattern) else specs:
            if spec.name not in chosen and matches(pattern, spec.name):
                chosen[spec.name] = spec
    return list(chosen.values())


def unmatched(
    patterns: Sequence[str], names: Collection[str], *, later: Callable[[str], bool]
) -> list[str]:
    """The patterns that select none of ``names`` and are not checked ``later`` (MCP names,
    whose server lists are read on first use)."""
    return [p for p in patterns if not later(p) and not any(matches(p, name) for name in names)]


def mcp_later(servers: Collection[str] | None) -> Callable[[str], bool]:
    """Whether a pattern names an MCP server's tool (``server__tool``), to be checked when that
    server's tool list is read. ``servers`` ``None``: no ``[mcp]`` support known here, so any
    ``x__y`` name counts."""

    def later(pattern: str) -> bool:
        prefix, sep, _ = pattern.partition("__")
        if not sep or not prefix:
            return False
        if servers is None:
            return True
        return any(matches(prefix, server) for server in servers)

    return later


def select_mcp_tools(
    patterns: Sequence[str] | None, available: Iterable[ToolSpec[Any]], servers: Collection[str]
) -> tuple[list[ToolSpec[Any]], list[str]]:
    """The MCP tools an agent's ``tools`` selects, and the ``server__tool`` patterns of these
    ``servers`` that selected none of their tools (a configuration error once the lists are read).

    An agent without a ``tools`` key gets every configured server's tools: configuring a server
    is the choice to use it.
    """
    specs = list(available)
    if patterns is None:
        return specs, []
    later = mcp_later(servers)
    server_patterns = [p for p in patterns if later(p)]
    names = [s.name for s in specs]
    missing = [p for p in server_patterns if not any(matches(p, n) for n in names)]
    return select_tools(server_patterns, specs), missing


def claude_code_hint(patterns: Sequence[str]) -> str | None:
    """What kernos calls tool names written for Claude Code (``Read, Grep, Glob``) or offers
    instead of them (``Bash``), or ``None`` when none is a Claude Code name."""
    found = [p for p in patterns if is_claude_tool(p)]
    if not found:
        return None
    renamed = [f"{p} {claude_tool_equivalent(p)}" for p in found if claude_tool_equivalent(p)]
    missing = [(p, claude_tool_instead(p)) for p in found if not claude_tool_equivalent(p)]
    them = (
        f"{found[0]} is a Claude Code tool name"
        if len(found) == 1
        else f"{', '.join(found)} are Claude Code tool names"
    )
    parts = []
    if renamed:
        parts.append("kernos calls " + " and ".join(renamed))
    parts.extend(f"{p} has no kernos equivalent ({instead})" for p, instead in missing)
    return f"{them}: " + "; ".join(parts)
