"""A long MCP call kept alive by its progress notifications: each restarts ``timeout``, up to
``max_timeout`` in all; the progress is shown by ``kernos -v run`` and kept in a child's
transcript. The server is a real one (the SDK's ``MCPServer``) that takes longer than
``timeout``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernos.runtime import McpServerConfig
from kernos.testing import FakeOpenAIServer, text, tool_call
from kernos.tools import McpToolset
from tests.mcp.conftest import kernos, toml_str, tool_data

PROGRESS = Path(__file__).with_name("progress_server.py")


def progress_config(name: str = "slow", **extra: object) -> str:
    lines = [
        f"[mcp.{name}]",
        f"command = {toml_str(sys.executable)}",
        f"args = [{toml_str(PROGRESS)}]",
    ]
    lines += [f"{key} = {json.dumps(value)}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"


def test_progress_keeps_a_call_alive_past_its_timeout_and_kernos_v_shows_it(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # the job (10 × 0.5 s) outlasts `timeout`, which must still cover the server's start
    (tmp_path / "kernos.toml").write_text(progress_config(timeout=4))
    server.script(
        tool_call("slow__long_job", '{"steps": 10, "every": 0.5}'),
        text("The job finished.", when="long job done"),
    )
    result = kernos(
        "-v", "run", "Run the long job.", "-m", "openai-chat:x", cwd=tmp_path, env=server.env()
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "The job finished.\n"
    source, said = tool_data(server.tool_results()[0])
    assert (source, said) == ("mcp:slow", "long job done")
    assert "slow__long_job 1/10 step 1" in result.stderr
    assert "slow__long_job 10/10 step 10" in result.stderr


def test_progress_of_a_childs_call_is_in_its_transcript(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        progress_config()
        + '[agents.worker]\ndescription = "Runs jobs"\ninstructions = "WORKER-AGENT"\n'
        + 'tools = ["slow__*"]\n'
    )
    task = {"prompt": "TASK: run the job", "description": "Run job", "subagent_type": "worker"}
    server.script(
        tool_call("task", json.dumps(task), when="Delegate."),
        tool_call(
            "slow__long_job", '{"steps": 3, "every": 0.1}', when="WORKER-AGENT", when_system=True
        ),
        text("child done", when="long job done"),
        text("parent done", when="child done"),
    )
    result = kernos("run", "Delegate.", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    listed = kernos("tasks", "list", "--json", cwd=tmp_path)
    (child,) = json.loads(listed.stdout)["tasks"]
    output = kernos("tasks", "output", child["id"], cwd=tmp_path)
    assert output.returncode == 0, output.stderr
    assert "[progress] slow__long_job 1/3 step 1" in output.stdout
    assert "[progress] slow__long_job 3/3 step 3" in output.stdout
    assert "long job done" in output.stdout


@pytest.fixture
async def toolset() -> object:
    config = McpServerConfig(command=sys.executable, args=[str(PROGRESS)], timeout=60)
    tools = McpToolset("slow", config)
    try:
        await tools.tools()  # started under a generous timeout: a loaded machine starts slowly
        tools.config = config.model_copy(update={"timeout": 2, "max_timeout": 4})
        yield tools
    finally:
        await tools.aclose()


async def test_a_call_without_progress_still_times_out_at_timeout(toolset: McpToolset) -> None:
    result = await toolset.call("silent", {"seconds": 8})
    assert result.is_error and result.code == "mcp_timeout"
    assert "got no answer from MCP server [slow] within 2 s, nor any progress" in result.text


async def test_progress_never_keeps_a_call_past_max_timeout(toolset: McpToolset) -> None:
    result = await toolset.call("forever", {"every": 0.2})
    assert result.is_error and result.code == "mcp_timeout"
    assert "within 4 s (its max_timeout: progress keeps a call alive that long)" in result.text


def test_max_timeout_defaults_to_ten_times_timeout() -> None:
    config = McpServerConfig(command="x", timeout=5)
    assert config.call_limit == 50
    assert McpServerConfig(command="x", timeout=5, max_timeout=2).call_limit == 5
