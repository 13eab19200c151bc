"""``kernos mcp --http``: Streamable HTTP at ``/mcp`` with a bearer token and DNS-rebinding
protection, a real ``kernos mcp`` process driven by the SDK client over HTTP (both eras)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from kernos.testing import FakeOpenAIServer, text
from tests import _cli
from tests._wait import until, wait_for
from tests.serve.conftest import server_command, server_env
from tests.serve.test_stdio import ERAS, IDS, XOR, only_text, statuses
from tests.tasks.tasks_helpers import S1, agent_is

TOKEN = "kernos-test-token-5f2a9c"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serving_http(project: Path, server: FakeOpenAIServer, *args: str, **env: str) -> Iterator[str]:
    """``kernos mcp --http`` on a free loopback port (with ``args``, ``env``), once it listens:
    its URL. Its stderr goes to ``server.stderr`` in ``project``."""
    port = free_port()
    log = (project / "server.stderr").open("w")
    process = subprocess.Popen(
        server_command("--http", f"127.0.0.1:{port}", *args),
        cwd=project,
        env=server_env(project, server, **env),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )

    def listening() -> bool:
        assert process.poll() is None, (project / "server.stderr").read_text()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            return False
        return True

    try:
        wait_for(listening, "kernos mcp --http to listen", 60)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@pytest.fixture
def http_server(project: Path, server: FakeOpenAIServer) -> Iterator[str]:
    with serving_http(
        project, server, "--token-env", "KERNOS_MCP_TOKEN", KERNOS_MCP_TOKEN=TOKEN
    ) as url:
        yield url


def test_no_token_is_401_and_a_wrong_one_too(http_server: str) -> None:
    assert httpx2.post(http_server, json=INIT, headers=ACCEPT).status_code == 401
    wrong = {**ACCEPT, "authorization": "Bearer nope"}
    assert httpx2.post(http_server, json=INIT, headers=wrong).status_code == 401


def test_foreign_host_and_foreign_origin_are_refused(http_server: str) -> None:
    auth = {**ACCEPT, "authorization": f"Bearer {TOKEN}"}
    foreign_host = httpx2.post(http_server, json=INIT, headers={**auth, "host": "evil.example"})
    assert foreign_host.status_code == 421
    origin = {**auth, "origin": "http://evil.example"}
    assert httpx2.post(http_server, json=INIT, headers=origin).status_code == 403
    assert httpx2.post(http_server, json=INIT, headers=auth).status_code == 200


@pytest.mark.parametrize("mode", ERAS)
async def test_with_the_token_the_sdk_client_spawns_a_child_from_padded_s1(
    http_server: str, server: FakeOpenAIServer, mode: str
) -> None:
    server.script(text("audited", when=agent_is("EXPLORE-AGENT"), repeat=True))
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
    async with http, Client(streamable_http_client(http_server, http_client=http), mode=mode) as c:
        assert "task" in {t.name for t in (await c.list_tools()).tools}
        said = only_text(await c.call_tool("task", S1))
        assert XOR not in said
        assert said.startswith("Started task Audit task tool (t_")
        bad = await c.call_tool("task", {"prompt": "a", "tasks": [{"prompt": "b"}]})
        assert bad.is_error and only_text(bad).startswith(XOR)


async def test_closing_the_response_stream_cancels_the_foreground_child(
    http_server: str, server: FakeOpenAIServer, project: Path
) -> None:
    release = threading.Event()
    server.script(text("never", when=agent_is("EXPLORE-AGENT"), hold=release))
    call = {"prompt": "Work long.", "subagent_type": "explore", "run_in_background": False}
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
    try:
        transport = streamable_http_client(http_server, http_client=http)
        async with http, Client(transport, mode=ERAS[1]) as c:
            running = asyncio.ensure_future(c.call_tool("task", call))
            await until(lambda: statuses(project), "the child recorded")
            running.cancel()  # 2026-07-28 over HTTP: the client closes the response stream
            with pytest.raises(asyncio.CancelledError):
                await running
            (task_id,) = statuses(project)
            await until(lambda: statuses(project)[task_id] == "cancelled", "the child cancelled")
            assert statuses(project) == {task_id: "cancelled"}
            assert IDS.fullmatch(task_id)
    finally:
        release.set()


def test_a_non_loopback_address_needs_a_token(project: Path, server: FakeOpenAIServer) -> None:
    result = _cli.kernos(
        "mcp", "--http", "0.0.0.0:0", cwd=project, env=server_env(project, server), timeout=60
    )
    assert result.returncode == 2
    assert "is not a loopback address: pass --token-env VAR" in result.stderr
    unset = _cli.kernos(
        "mcp",
        "--http",
        "0.0.0.0:0",
        "--token-env",
        "KERNOS_NO_SUCH_VAR",
        cwd=project,
        env=server_env(project, server),
        timeout=60,
    )
    assert unset.returncode == 2
    assert re.search(r"KERNOS_NO_SUCH_VAR: the variable is unset or empty", unset.stderr)
