"""``kernos mcp`` as a real process on stdio, driven by the official ``mcp`` SDK client: an
asked call is put to the host's user through MCP elicitation when the client declares it
(approve, or deny with a reason the model reads), and refused with ``approval_required`` text
naming the ``kernos.toml`` line that allows the tool when it does not; a denied tool is not
listed. Every answer is kept in the store, ``kernos approvals --all --json`` shows how."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types
from mcp import Client, StdioServerParameters

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests import _cli
from tests.serve.conftest import KERNOS, server_env
from tests.serve.test_stdio import only_text
from tests.tasks.tasks_helpers import agent_is

#: the host's call: a foreground child whose model writes a file (``write_file`` asks first)
WRITE = {"prompt": "Write the note.", "subagent_type": "explore", "run_in_background": False}
NOTE = {"path": "note.txt", "content": "one line\n"}


@asynccontextmanager
async def host(
    project: Path,
    model: FakeOpenAIServer,
    answers: mcp_types.ElicitResult | list[mcp_types.ElicitResult] | None,
) -> AsyncIterator[tuple[Client, list[str]]]:
    """``kernos mcp`` on stdio and a host whose user gives ``answers`` to its elicitations in
    turn (one answer: to every one; ``None``: a host that does not declare elicitation); the
    messages its user was shown."""
    shown: list[str] = []
    params = StdioServerParameters(
        command=KERNOS, args=["mcp"], env=server_env(project, model), cwd=str(project)
    )
    options: dict[str, Any] = {}
    if answers is not None:
        script = answers if isinstance(answers, list) else None

        async def elicit(context: Any, request: Any) -> mcp_types.ElicitResult:
            shown.append(request.message)
            if script is None:
                assert isinstance(answers, mcp_types.ElicitResult)
                return answers
            return script.pop(0)

        options["elicitation_callback"] = elicit
    async with Client(params, mode="legacy", **options) as client:
        yield client, shown


def answered(project: Path, model: FakeOpenAIServer) -> list[dict[str, Any]]:
    """Every request ``kernos approvals --all --json`` lists, oldest first."""
    done = _cli.kernos(
        "approvals", "--all", "--json", cwd=project, env=server_env(project, model), timeout=60
    )
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)["requests"]
    return sorted(rows, key=lambda row: row["asked_at"])


async def test_the_hosts_user_approves_a_childs_write_and_it_runs(
    project: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call("write_file", NOTE, when=agent_is("EXPLORE-AGENT", "Write the note.")),
        text("written", when=agent_is("EXPLORE-AGENT", role="tool")),
    )
    accept = mcp_types.ElicitResult(action="accept", content={"approve": True})
    async with host(project, server, accept) as (client, shown):
        result = await client.call_tool("task", WRITE)
    assert not result.is_error, only_text(result)
    assert (project / "note.txt").read_text() == "one line\n"
    (message,) = shown
    assert message.startswith("kernos: write_file needs your approval (agent explore;")
    assert "+one line" in message  # the diff the write makes
    (row,) = answered(project, server)
    kept = (row["tool"], row["state"], row["answered_how"])
    assert kept == ("write_file", "approved", "mcp host")


async def test_the_hosts_user_denies_with_a_reason_the_childs_model_reads(
    project: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call("write_file", NOTE, when=agent_is("EXPLORE-AGENT", "Write the note.")),
        tool_call("write_file", NOTE, when=agent_is("EXPLORE-AGENT", "not today", "tool")),
        text("gave up", when=agent_is("EXPLORE-AGENT", "declined", "tool")),
    )
    answers = [
        mcp_types.ElicitResult(action="accept", content={"approve": False, "reason": "not today"}),
        mcp_types.ElicitResult(action="decline"),
    ]
    async with host(project, server, answers) as (client, shown):
        result = await client.call_tool("task", WRITE)
    assert not result.is_error, only_text(result)
    assert len(shown) == 2
    assert server.tool_results() == [
        "the user denied this write_file call: not today; do not repeat it unchanged, adapt or "
        "ask the user",
        "the user denied this write_file call: the host's user declined; do not repeat it "
        "unchanged, adapt or ask the user",
    ]
    assert not (project / "note.txt").exists()
    rows = answered(project, server)
    kept = [(r["state"], r["answered_how"], r["answered_by"], r["reason"]) for r in rows]
    assert kept == [
        ("denied", "mcp host", "the user of mcp", "not today"),
        ("denied", "mcp host", "the user of mcp", "the host's user declined"),
    ]


async def test_a_host_without_elicitation_is_refused_with_how_to_allow_the_tool(
    project: Path, server: FakeOpenAIServer
) -> None:
    with (project / "kernos.toml").open("a") as toml:
        toml.write('\n[permissions]\ndeny = ["search_files"]\n')
    async with host(project, server, None) as (client, _):
        names = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("write_file", NOTE)
    assert "search_files" not in names and {"read_file", "write_file"} <= names
    assert result.is_error
    assert only_text(result) == (
        "write_file needs a person's approval and nobody can be asked here; allow it in "
        'kernos.toml: [permissions] allow = ["write_file"]'
    )
    assert not (project / "note.txt").exists()
    (row,) = answered(project, server)
    assert (row["state"], row["answered_how"]) == ("denied", "no one to ask")
    assert "+one line" in row["diff"]
