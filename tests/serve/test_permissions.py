"""``kernos mcp`` and the permission rules: a denied tool is not listed; an asked call is refused
with ``approval_required`` text saying how to allow it in kernos.toml (no elicitation yet)."""

from __future__ import annotations

from pathlib import Path

from kernos.testing import FakeOpenAIServer
from tests.serve.test_compress_tool import connect
from tests.serve.test_stdio import only_text


async def test_an_asked_call_over_mcp_is_refused_with_how_to_allow_it(
    project: Path, model: FakeOpenAIServer
) -> None:
    with (project / "kernos.toml").open("a") as toml:
        toml.write('\n[permissions]\ndeny = ["search_files"]\n')
    async with connect(project) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("write_file", {"path": "x.txt", "content": "x"})
    assert "search_files" not in names and {"read_file", "write_file"} <= names
    assert result.is_error
    assert only_text(result) == (
        "write_file needs a person's approval and nobody can be asked here; allow it in "
        'kernos.toml: [permissions] allow = ["write_file"]'
    )
    assert not (project / "x.txt").exists()
