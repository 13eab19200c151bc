"""``kernos mcp`` serves more than tools: its tools in a fixed order, a text block first in every
result, and each task of the connection's session as a ``kernos://tasks/{id}`` resource,
listed, read and, when subscribed, updated; the official ``mcp`` SDK client over stdio and HTTP."""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import ResourceUpdatedNotification, TextResourceContents

from kernos.testing import FakeOpenAIServer, text
from tests import _wait as wait
from tests.serve.conftest import KERNOS, server_env
from tests.serve.test_http import TOKEN, http_server  # noqa: F401  (the fixture)
from tests.serve.test_stdio import ERAS, IDS, only_text
from tests.tasks.tasks_helpers import agent_is

BACKGROUND = {"prompt": "Look around.", "subagent_type": "explore", "run_in_background": True}


@asynccontextmanager
async def stdio_client(
    project: Path, model: FakeOpenAIServer, updates: list[str], mode: str = "legacy"
) -> AsyncIterator[Client]:
    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            updates.append(message.params.uri)

    params = StdioServerParameters(
        command=KERNOS, args=["mcp"], env=server_env(project, model), cwd=str(project)
    )
    async with Client(params, mode=mode, message_handler=on_message, cache=None) as client:
        yield client


@asynccontextmanager
async def http_client(url: str, updates: list[str], mode: str = "legacy") -> AsyncIterator[Client]:
    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            updates.append(message.params.uri)

    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
    transport = streamable_http_client(url, http_client=http)
    async with (
        http,
        Client(transport, mode=mode, message_handler=on_message, cache=None) as client,
    ):
        yield client


async def read_text(client: Client, uri: str) -> str:
    (content,) = (await client.read_resource(uri)).contents
    assert isinstance(content, TextResourceContents)
    return content.text


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_task_is_a_resource_listed_read_and_updated_when_subscribed(
    project: Path, server: FakeOpenAIServer, transport: str, request: pytest.FixtureRequest
) -> None:
    release = threading.Event()
    server.script(text("RESOURCE-FINAL", when=agent_is("EXPLORE-AGENT"), hold=release))
    updates: list[str] = []
    if transport == "stdio":
        connection = stdio_client(project, server, updates)
    else:
        connection = http_client(request.getfixturevalue("http_server"), updates)
    try:
        async with connection as client:
            caps = client.server_capabilities
            assert caps.resources is not None and caps.resources.subscribe
            assert not caps.resources.list_changed  # never sent, so not declared
            assert (caps.prompts, caps.logging, caps.completions) == (None, None, None)
            (template,) = (await client.list_resource_templates()).resource_templates
            assert template.uri_template == "kernos://tasks/{id}"
            assert (await client.list_resources()).resources == []

            said = only_text(await client.call_tool("task", BACKGROUND))
            (task_id,) = set(IDS.findall(said))
            uri = f"kernos://tasks/{task_id}"
            (listed,) = (await client.list_resources()).resources
            assert (listed.uri, listed.name, listed.mime_type) == (uri, task_id, "text/plain")
            before = await read_text(client, uri)
            assert before.split(" ")[:2] in ([task_id, "running"], [task_id, "pending"])
            assert "\ntranscript:\n" in before and "RESOURCE-FINAL" not in before

            with warnings.catch_warnings():  # resources/subscribe is the handshake era's
                warnings.simplefilter("ignore")
                await client.subscribe_resource(uri)
            release.set()
            await wait.until(lambda: uri in updates, "notifications/resources/updated")

            async def completed() -> str | None:  # an update may come before the last event
                text = await read_text(client, uri)
                done = "[status] running → completed" in text
                return text if text.startswith(f"{task_id} completed") and done else None

            after = await wait.until(completed, "the completed transcript")
            assert after.startswith(f"{task_id} completed")
            assert "final text:\nRESOURCE-FINAL" in after
            assert "[status] running → completed" in after

            with pytest.raises(MCPError) as unknown:
                await client.read_resource("kernos://tasks/t_00000000")
            assert "is not a task of this connection" in unknown.value.message
    finally:
        release.set()


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_are_listed_sorted_by_name_and_every_result_starts_with_text(
    project: Path, server: FakeOpenAIServer, mode: str
) -> None:
    async with stdio_client(project, server, [], mode=mode) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == sorted(names)
        assert len(names) > 5
        for name, args in [("task_output", {"task_id": "t_1"}), ("no_such", {}), ("task", {})]:
            result = await client.call_tool(name, args)
            assert result.content and result.content[0].type == "text", name


async def test_another_connections_task_is_not_readable(
    project: Path,
    server: FakeOpenAIServer,
    http_server: str,  # noqa: F811
) -> None:
    server.script(text("mine", when=agent_is("EXPLORE-AGENT"), repeat=True))
    async with http_client(http_server, []) as first, http_client(http_server, []) as second:
        said = only_text(await first.call_tool("task", BACKGROUND))
        (task_id,) = set(IDS.findall(said))
        assert task_id in await read_text(first, f"kernos://tasks/{task_id}")
        assert (await second.list_resources()).resources == []
        with pytest.raises(MCPError) as refused:
            await second.read_resource(f"kernos://tasks/{task_id}")
        assert "is not a task of this connection" in refused.value.message


async def test_2026_07_28_a_listen_stream_gets_the_tasks_updates(
    project: Path, server: FakeOpenAIServer
) -> None:
    release = threading.Event()
    server.script(text("LISTENED", when=agent_is("EXPLORE-AGENT"), hold=release))
    try:
        async with stdio_client(project, server, [], mode="auto") as client:
            assert client.protocol_version == "2026-07-28"  # discovered, not pinned
            caps = client.server_capabilities
            assert caps.resources is not None and caps.resources.subscribe
            assert not caps.resources.list_changed
            assert caps.tools is not None and not caps.tools.list_changed  # never sent
            said = only_text(await client.call_tool("task", BACKGROUND))
            (task_id,) = set(IDS.findall(said))
            uri = f"kernos://tasks/{task_id}"
            async with client.listen(resource_subscriptions=[uri]) as stream:
                release.set()
                event = await asyncio.wait_for(anext(aiter(stream)), timeout=120)
            assert getattr(event, "uri", None) == uri
    finally:
        release.set()
