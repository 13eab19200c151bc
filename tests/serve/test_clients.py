"""Other real clients of ``kernos mcp``: ``fastmcp.Client``, a pydantic-ai ``Agent`` consuming it
through pydantic-ai's MCP client, and the MCP Inspector CLI from npm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fastmcp import Client as FastMCPClient
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.serve.conftest import KERNOS, server_env
from tests.serve.test_stdio import IDS, XOR, statuses
from tests.tasks.tasks_helpers import S1, agent_is

ROOT = Path(__file__).resolve().parents[2]
INSPECTOR = ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "mcp-inspector"


def transport(project: Path, server: FakeOpenAIServer) -> StdioTransport:
    return StdioTransport(
        KERNOS, ["mcp"], env=server_env(project, server), cwd=str(project), keep_alive=False
    )


async def test_fastmcp_client_lists_and_calls_through_the_boundary(
    project: Path, server: FakeOpenAIServer
) -> None:
    async with FastMCPClient(transport(project, server)) as client:
        names = {t.name for t in await client.list_tools()}
        assert {"task", "compress", "output_send__log"} <= names
        both = {"prompt": "a", "tasks": [{"prompt": "b"}]}
        bad = await client.call_tool("task", both, raise_on_error=False)
        assert bad.is_error
        assert bad.content[0].text.startswith(XOR)  # type: ignore[union-attr]
        sent = await client.call_tool("output_send__log", {"payload": ["hi"], "type": "null"})
        assert sent.content[0].text == "sent 1 message via [log]"  # type: ignore[union-attr]
        assert sent.structured_content is None


async def test_a_pydantic_ai_agent_sends_padded_s1_and_the_child_spawns(
    project: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call("task", S1, when=agent_is("HOST-AGENT", "audit please")),
        text("boundary audited", when=agent_is("EXPLORE-AGENT")),
        text("Started it.", when=agent_is("HOST-AGENT", "Started task")),
    )
    kernos = MCPToolset(FastMCPClient(transport(project, server)))
    host = Agent(
        OpenAIChatModel("host", provider=OpenAIProvider(base_url=server.base_url, api_key="k")),
        instructions="HOST-AGENT: you use kernos.",
        toolsets=[kernos],
    )
    async with host:
        result = await host.run("audit please")
    assert result.output == "Started it."
    results = server.tool_results()
    assert results and not any(XOR in r for r in results)
    assert results[0].startswith("Started task Audit task tool (t_")
    (task_id,) = set(IDS.findall(results[0]))
    assert task_id in statuses(project)


def _inspector() -> Path:
    if INSPECTOR.exists():
        return INSPECTOR
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the MCP Inspector CLI test needs Node.js and npm")
    subprocess.run(["make", "inspector"], cwd=ROOT, check=True, capture_output=True, timeout=600)
    return INSPECTOR


def test_the_mcp_inspector_cli_lists_and_calls_tools(
    project: Path, server: FakeOpenAIServer
) -> None:
    inspector = _inspector()
    env = server_env(project, server)
    # a loaded machine can take longer than the Inspector's default 15 s to start `kernos mcp`
    base = [str(inspector), "--cli", "--connect-timeout", "100000", KERNOS, "mcp"]
    for key in ("KERNOS_HOME", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        base[2:2] = ["-e", f"{key}={env[key]}"]
    listed = subprocess.run(
        [*base, "--method", "tools/list"],
        cwd=project,
        env={**os.environ, "KERNOS_HOME": env["KERNOS_HOME"]},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    names = {t["name"] for t in json.loads(listed.stdout)["tools"]}
    assert {"task", "compress", "output_send__log"} <= names
    called = subprocess.run(
        [
            *base,
            "--method",
            "tools/call",
            "--tool-name",
            "task",
            "--tool-arg",
            "prompt=a",
            "--tool-arg",
            'tasks=[{"prompt": "b"}]',
        ],
        cwd=project,
        env={**os.environ, "KERNOS_HOME": env["KERNOS_HOME"]},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert called.returncode == 5, called.stderr  # the Inspector's exit code for isError
    assert '"code":"tool_is_error"' in called.stderr
    answer = json.loads(called.stdout)
    assert answer["isError"] is True
    assert answer["content"] == [
        {"type": "text", "text": "Provide EITHER prompt OR tasks, not both. Remove one and retry."}
    ]
