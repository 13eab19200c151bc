"""``kernos mcp`` and the permission rules: a denied tool is not listed; an asked call is put to
the host's user through MCP elicitation (approve, or deny with a reason) when the host supports it,
else refused with ``approval_required`` text saying how to allow it in kernos.toml."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types
from mcp import Client

from kernos._serve import KernosMcpServer
from kernos.runtime import ApprovalStore, Runtime
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


@asynccontextmanager
async def connect_eliciting(project: Path, answer: Any) -> AsyncIterator[tuple[Client, list[str]]]:
    """A host whose user answers every elicitation with ``answer`` (``ElicitResult``); the
    messages it was shown."""
    shown: list[str] = []

    async def elicit(context: Any, params: Any) -> Any:
        shown.append(params.message)
        return answer

    runtime = Runtime.open(project / "kernos.toml", cwd=project)
    served = KernosMcpServer(runtime)
    try:
        async with Client(served.server, mode="legacy", elicitation_callback=elicit) as client:
            yield client, shown
    finally:
        await served.aclose()
        runtime.close()


async def test_an_asked_call_is_put_to_the_hosts_user_who_approves(
    project: Path, model: FakeOpenAIServer
) -> None:
    accept = mcp_types.ElicitResult(action="accept", content={"approve": True})
    async with connect_eliciting(project, accept) as (client, shown):
        result = await client.call_tool("write_file", {"path": "x.txt", "content": "hi\n"})
    assert not result.is_error, only_text(result)
    assert (project / "x.txt").read_text() == "hi\n"
    (message,) = shown
    assert message.startswith("kernos: write_file needs your approval")
    assert "+hi" in message  # the diff the write makes


async def test_the_hosts_user_denies_with_a_reason_the_model_reads(
    project: Path, model: FakeOpenAIServer
) -> None:
    deny = mcp_types.ElicitResult(action="accept", content={"approve": False, "reason": "no"})
    async with connect_eliciting(project, deny) as (client, _):
        denied = await client.call_tool("write_file", {"path": "x.txt", "content": "x"})
    declined = mcp_types.ElicitResult(action="decline")
    async with connect_eliciting(project, declined) as (client, _):
        refused = await client.call_tool("write_file", {"path": "x.txt", "content": "x"})
    assert denied.is_error and refused.is_error
    assert only_text(denied) == (
        "the user denied this write_file call: no; do not repeat it unchanged, adapt or ask the "
        "user"
    )
    assert "the user denied this write_file call: the host's user declined" in only_text(refused)
    assert not (project / "x.txt").exists()


async def test_every_answer_over_mcp_is_kept_in_the_store(
    project: Path, model: FakeOpenAIServer
) -> None:
    accept = mcp_types.ElicitResult(action="accept", content={"approve": True})
    async with connect_eliciting(project, accept) as (client, _):
        await client.call_tool("write_file", {"path": "x.txt", "content": "hi\n"})
    deny = mcp_types.ElicitResult(action="accept", content={"approve": False, "reason": "no"})
    async with connect_eliciting(project, deny) as (client, _):
        await client.call_tool("write_file", {"path": "y.txt", "content": "x"})
    async with connect(project) as client:  # a host that cannot elicit: nobody to ask
        await client.call_tool("write_file", {"path": "z.txt", "content": "x"})
    runtime = Runtime.open(project / "kernos.toml", cwd=project)
    try:
        rows = ApprovalStore(runtime.store).history()
    finally:
        runtime.close()
    kept = [(r.arguments["path"], str(r.state), r.answered_how) for r in reversed(rows)]
    assert kept == [
        ("x.txt", "approved", "mcp host"),
        ("y.txt", "denied", "mcp host"),
        ("z.txt", "denied", "no one to ask"),
    ]
    assert rows[1].reason == "no" and rows[1].answered_by == "the user of mcp"
    assert rows[2].preview is not None and "+hi" in rows[2].preview
