"""Every model response that reaches kernos is in the usage table, whichever process ran the
session: here the children ``kernos mcp`` spawns (``kernos run`` and a failed run are in
``tests/usage/test_usage_cli.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mcp import Client, StdioServerParameters

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests import _cli
from tests.conftest import KERNOS
from tests.serve.conftest import server_env
from tests.tasks.tasks_helpers import agent_is

CHILD = {"prompt": "List the files.", "subagent_type": "explore", "name": "lister",
         "run_in_background": False}  # fmt: skip


def usage(project: Path, server: FakeOpenAIServer) -> dict[str, object]:
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(project / ".kernos")}
    done = _cli.kernos("usage", "--by", "task", "--json", cwd=project, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    document: dict[str, object] = json.loads(done.stdout)
    return document


async def test_children_of_kernos_mcp_record_their_usage(
    project: Path, server: FakeOpenAIServer
) -> None:
    explore = agent_is("EXPLORE-AGENT")
    server.script(
        tool_call("list_files", {"path": "."}, when=explore),
        text("two files", when=explore),
    )
    params = StdioServerParameters(
        command=KERNOS, args=["mcp"], env=server_env(project, server), cwd=str(project)
    )
    async with Client(params) as client:
        answer = await client.call_tool("task", CHILD)
        assert not answer.is_error, answer.content
    assert len(server.requests) == 2
    document = usage(project, server)
    total = document["total"]
    assert isinstance(total, dict) and total["requests"] == 2, document
    (group,) = document["groups"]  # type: ignore[misc]
    assert group["task"].startswith("t_") and group["input_tokens"] > 0


async def test_a_repaired_call_of_a_kernos_mcp_child_is_counted(
    project: Path, server: FakeOpenAIServer
) -> None:
    explore = agent_is("EXPLORE-AGENT")
    server.script(
        tool_call("list_files", {"path": ".", "pattern": ""}, when=explore),  # "" is padding
        text("two files", when=explore),
    )
    params = StdioServerParameters(
        command=KERNOS, args=["mcp"], env=server_env(project, server), cwd=str(project)
    )
    async with Client(params) as client:
        answer = await client.call_tool("task", CHILD)
        assert not answer.is_error, answer.content
    total = usage(project, server)["total"]
    assert isinstance(total, dict), total
    assert (total["repaired_calls"], total["rejected_calls"]) == (1, 0)


async def test_a_repaired_call_of_the_mcp_host_is_logged_and_counted(
    project: Path, server: FakeOpenAIServer
) -> None:
    params = StdioServerParameters(
        command=KERNOS, args=["mcp"], env=server_env(project, server), cwd=str(project)
    )
    async with Client(params) as client:
        padded = await client.call_tool("list_files", {"path": ".", "pattern": ""})
        assert not padded.is_error, padded.content
        clean = await client.call_tool("list_files", {"path": "."})
        assert not clean.is_error, clean.content
        refused = await client.call_tool("list_files", {"path": "../.."})
        assert refused.is_error, refused.content
    log = (project / ".kernos" / "kernos.log").read_text(encoding="utf-8")
    receipts = [line for line in log.splitlines() if "mcp host call:" in line]
    assert len(receipts) == 1, log
    assert receipts[0].endswith('mcp host call: list_files repaired: pattern "" → absent (padding)')
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(project / ".kernos")}
    done = _cli.kernos("usage", "--by", "agent", "--json", cwd=project, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    (group,) = json.loads(done.stdout)["groups"]
    assert (group["agent"], group["requests"]) == ("mcp-host", 0)
    assert (group["repaired_calls"], group["rejected_calls"]) == (1, 1)
