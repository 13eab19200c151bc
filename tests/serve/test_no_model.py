"""``kernos mcp`` without a usable model (no API key in its environment, no model named): the
server starts and lists every tool; ``task`` and ``compress`` answer the coded ``config_error``
saying what to set in the host's MCP config ``env``; the other tools keep working."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.serve.conftest import CONFIG, KERNOS
from tests.serve.test_stdio import only_text

WITHOUT = ("KERNOS_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL")


def _env(project: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in WITHOUT}
    return {**base, "KERNOS_HOME": str(project / ".kernos")}


@pytest.mark.parametrize("named", [True, False], ids=["no-api-key", "no-model"])
async def test_the_server_starts_and_the_model_tools_say_what_to_set(
    project: Path, named: bool
) -> None:
    if not named:
        config = CONFIG.replace('default_model = "openai-chat:test"\n', "")
        (project / "kernos.toml").write_text(config, encoding="utf-8")
    (project / "notes.txt").write_text("alpha\n", encoding="utf-8")
    params = StdioServerParameters(
        command=KERNOS, args=["mcp"], env=_env(project), cwd=str(project)
    )
    async with Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"task", "task_send", "task_output", "compress", "output_send__log"} <= names
        assert "read_file" in names
        for tool, args in (
            ("task", {"prompt": "Look.", "subagent_type": "explore"}),
            ("compress", {"path": "notes.txt"}),
        ):
            result = await client.call_tool(tool, args)
            said = only_text(result)
            assert result.is_error, said
            assert said.startswith(
                f"`{tool}` needs a model and this kernos server has none it can use: "
            )
            wanted = "OPENAI_API_KEY" if named else "KERNOS_MODEL"
            assert f'add "{wanted}"' in said
            assert "`env` of the kernos server in your MCP host's config" in said
        read = await client.call_tool("read_file", {"path": "notes.txt"})
        assert not read.is_error and "alpha" in only_text(read)
        sent = await client.call_tool("output_send__log", {"payload": ["one"]})
        assert (sent.is_error, only_text(sent)) == (False, "sent 1 message via [log]")
    assert (project / "notes.txt").read_text() == "alpha\n"  # compress wrote nothing
