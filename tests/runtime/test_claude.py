"""The Claude Code name table (kernos.runtime._config._claude): pure rules, one line each."""

from __future__ import annotations

import pytest

from kernos.runtime import (
    CLAUDE_CODE_TOOL_MAP,
    claude_tool_equivalent,
    claude_tool_instead,
    is_claude_tool,
    map_claude_tools,
)


def test_the_mapping_table() -> None:
    mapped = {name: kernos for name, kernos in CLAUDE_CODE_TOOL_MAP.items() if kernos}
    assert mapped == {
        "Read": "read_file",
        "Grep": "search_files",
        "Glob": "list_files",
        "LS": "list_files",
        "Edit": "edit_file",
        "MultiEdit": "edit_file",
        "Write": "write_file",
        "Task": "task",  # kernos's own task tool (a run adds it whatever tools says)
    }


def test_claude_names_are_mapped_once_in_order_and_others_kept() -> None:
    assert map_claude_tools(["Read", "Glob", "LS", "Bash", "git__*", "read_file"]) == [
        "read_file",
        "list_files",
        "Bash",
        "git__*",
    ]
    assert map_claude_tools(["read", "ls"]) == ["read", "ls"]  # kernos names keep their case


@pytest.mark.parametrize("name", [n for n, k in CLAUDE_CODE_TOOL_MAP.items() if k is None])
def test_every_unmappable_tool_says_what_kernos_offers_instead(name: str) -> None:
    instead = claude_tool_instead(name)
    assert instead and instead[-1] != "."
    assert claude_tool_equivalent(name) is None
    assert is_claude_tool(name.lower())


def test_mapped_and_unknown_names_have_no_instead() -> None:
    assert claude_tool_instead("Read") is None
    assert claude_tool_instead("read_file") is None
    assert claude_tool_equivalent("grep") == "search_files"
    assert not is_claude_tool("read_file")
