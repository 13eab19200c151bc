"""Claude Code agent files read as kernos agents: pure rules over names, no I/O.

Claude Code keeps project agents in ``.claude/agents/*.md`` with the same front matter kernos
reads (``description``, ``tools``, ``model``); its tool names and model aliases differ. This module
is the one place that knows them: :data:`CLAUDE_CODE_TOOL_MAP` (the table), :func:`map_claude_tools`
and :func:`claude_tool_instead` (what kernos offers for a tool it has no equivalent of).
"""

from __future__ import annotations

from collections.abc import Sequence

#: Claude Code's tool names (its spelling) → the kernos tool that does the same, ``None``: none
CLAUDE_CODE_TOOL_MAP: dict[str, str | None] = {
    "Read": "read_file",
    "Grep": "search_files",
    "Glob": "list_files",
    "LS": "list_files",
    "Bash": None,
    "BashOutput": None,
    "KillShell": None,
    "Edit": "edit_file",
    "MultiEdit": "edit_file",
    "Write": "write_file",
    "NotebookEdit": None,
    "NotebookRead": None,
    "WebFetch": None,
    "WebSearch": None,
    "Task": "task",
    "TodoWrite": None,
    "SlashCommand": None,
    "ExitPlanMode": None,
}

_ADD_ONE = "add one through an [mcp.NAME] server or a [tools.NAME] function"

#: what kernos offers instead of a Claude Code tool it has no equivalent of
_INSTEAD: dict[str, str] = {
    "Bash": f"kernos has no shell tool; {_ADD_ONE}",
    "BashOutput": f"kernos has no shell tool; {_ADD_ONE}",
    "KillShell": f"kernos has no shell tool; {_ADD_ONE}",
    "NotebookEdit": f"kernos's built-in tools edit text files, not notebooks; {_ADD_ONE}",
    "NotebookRead": "read the notebook file with read_file",
    "WebFetch": f"kernos fetches no URLs itself; {_ADD_ONE}",
    "WebSearch": f"kernos has no web search; {_ADD_ONE}",
    "TodoWrite": "kernos has no to-do tool: remove TodoWrite",
    "SlashCommand": "kernos has no slash commands: remove SlashCommand",
    "ExitPlanMode": "kernos has no plan mode: remove ExitPlanMode",
}

#: Claude Code's model aliases (``model: sonnet``), resolved through ``[models.ALIAS]``
CLAUDE_CODE_MODELS: dict[str, str] = {
    "sonnet": "anthropic:claude-sonnet-4-5",
    "opus": "anthropic:claude-opus-4-1",
    "haiku": "anthropic:claude-haiku-4-5",
}


def claude_tool_instead(name: str) -> str | None:
    """What kernos offers instead of the Claude Code tool ``name`` (any case) when it has no
    equivalent; ``None`` when ``name`` is no Claude Code tool or maps to a kernos tool."""
    canonical = _canonical(name)
    if canonical is None or CLAUDE_CODE_TOOL_MAP[canonical] is not None:
        return None
    return _INSTEAD.get(canonical, _ADD_ONE)


def claude_tool_equivalent(name: str) -> str | None:
    """The kernos tool that does what the Claude Code tool ``name`` (any case) does, or None."""
    canonical = _canonical(name)
    return CLAUDE_CODE_TOOL_MAP[canonical] if canonical is not None else None


def is_claude_tool(name: str) -> bool:
    """Whether ``name`` (any case) is one of Claude Code's tool names."""
    return _canonical(name) is not None


def map_claude_tools(names: Sequence[str]) -> list[str]:
    """An agent file's ``tools`` with Claude Code's names (its own spelling: ``Read``, ``LS``)
    replaced by kernos's, each once, in order; a name with no kernos equivalent (``Bash``) is
    kept as written, so the tool check reports it (:func:`claude_tool_instead` says what to use).
    Any other name is a kernos name and is kept."""
    mapped: list[str] = []
    for name in names:
        kernos = CLAUDE_CODE_TOOL_MAP.get(name) or name
        if kernos not in mapped:
            mapped.append(kernos)
    return mapped


def _canonical(name: str) -> str | None:
    folded = name.casefold()
    return next((c for c in CLAUDE_CODE_TOOL_MAP if c.casefold() == folded), None)
