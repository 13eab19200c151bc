"""The README's host snippets for ``kernos mcp`` are valid as written (a newcomer copies them)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## kernos in other agent hosts (`kernos mcp`)")
    return text[start : text.index("\n## ", start + 1)]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section(), flags=re.S)


def test_claude_code_cursor_opencode_and_codex_each_start_kernos_mcp() -> None:
    assert blocks("sh") == ["claude mcp add kernos -- kernos mcp\n"]
    cursor, opencode = (json.loads(b) for b in blocks("json"))
    assert cursor["mcpServers"]["kernos"] == {"command": "kernos", "args": ["mcp"]}
    assert opencode["mcp"]["kernos"]["command"] == ["kernos", "mcp"]
    (codex,) = (tomllib.loads(b) for b in blocks("toml"))
    assert codex["mcp_servers"]["kernos"]["command"] == "kernos"
    assert codex["mcp_servers"]["kernos"]["args"][0] == "mcp"
