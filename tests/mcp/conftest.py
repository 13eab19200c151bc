"""Fixtures for MCP tests: real MCP servers next to a scripted model server.

``kernos`` runs the real CLI in a subprocess (as a user does); ``docs_server`` is a Streamable
HTTP MCP server (the SDK's ``MCPServer``) on loopback that answers only with the right bearer
token; ``RECORDER`` is a stdio server script that records each call exactly as received.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer

from kernos.testing import text, tool_call
from tests import _cli
from tests.mcp.oauth_server import OAuthDocsServer, oauth_docs_server

BIN = Path(sys.executable).parent
RECORDER = Path(__file__).with_name("recording_server.py")
DOCS_TOKEN = "s3cret-docs-token"


def kernos_env(cwd: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("KERNOS_MODEL", "OPENAI_API_KEY")}
    return {**base, "KERNOS_HOME": str(cwd / ".kernos"), **(extra or {})}


def kernos(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return _cli.kernos(*args, cwd=cwd, env=kernos_env(cwd, env), timeout=timeout)


def toml_str(value: str | Path) -> str:
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def recorder_config(name: str, record_file: Path, **extra: str) -> str:
    lines = [
        f"[mcp.{name}]",
        f"command = {toml_str(sys.executable)}",
        f"args = [{toml_str(RECORDER)}]",
        f"env = {{ RECORD_FILE = {toml_str(record_file)} }}",
    ]
    lines += [f"{key} = {value}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"


def child_looks_up(project: Path, record_file: Path) -> tuple[Any, ...]:
    """A project whose ``explore`` agent has the recording server's ``lookup`` (its calls kept in
    ``record_file``), and how a script begins there: the parent spawns an explore child, which
    looks up ``from child`` and answers ``child done``."""
    (project / "kernos.toml").write_text(
        recorder_config("rec", record_file)
        + '[agents.explore]\ndescription = "Looks things up"\ntools = ["rec__lookup"]\n'
    )
    task = {"prompt": "TASK: look it up", "description": "Look up", "subagent_type": "explore"}
    return (
        tool_call("task", json.dumps(task)),
        tool_call("rec__lookup", '{"query": "from child", "tags": []}', when="TASK: look it up"),
        text("child done", when="for 'from child'"),
    )


def _records(record_file: Path) -> list[dict[str, Any]]:
    if not record_file.exists():
        return []
    return [json.loads(line) for line in record_file.read_text().splitlines() if line.strip()]


def recorded(record_file: Path) -> list[dict[str, Any]]:
    """Each call the recording server received: ``{"tool", "arguments"}``, as sent."""
    return [{"tool": r["tool"], "arguments": r["arguments"]} for r in _records(record_file)]


def recording_pids(record_file: Path) -> set[int]:
    """The process ids of the recording servers that answered."""
    return {r["pid"] for r in _records(record_file)}


_DATA = re.compile(
    r'\A<tool-result source="(?P<source>[^"]+)" nonce="(?P<nonce>[0-9a-f]{8})">\n'
    r"(?P<text>.*)\n</tool-result-(?P=nonce)>\Z",
    re.DOTALL,
)


def tool_data(content: str) -> tuple[str, str]:
    """A delimited tool result as the model read it: its source and its own text."""
    found = _DATA.match(content)
    assert found is not None, f"not a delimited tool result: {content[:200]!r}"
    return found["source"], found["text"]


def offered_tools(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", [])]


class _BearerOnly:
    """ASGI middleware: 401 unless ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token
        self.seen: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            got = headers.get(b"authorization", b"").decode()
            self.seen.append(got)
            if got != f"Bearer {self.token}":
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"bad token"})
                return
        await self.app(scope, receive, send)


class DocsServer:
    def __init__(self, url: str, guard: _BearerOnly) -> None:
        self.url = url
        self.guard = guard


@pytest.fixture
def docs_server() -> Iterator[DocsServer]:
    mcp = MCPServer("docs")

    @mcp.tool()
    def search(query: str, limit: int = 5) -> str:
        """Search the docs."""
        return f"docs: 2 pages mention {query!r} (limit {limit})"

    guard = _BearerOnly(mcp.streamable_http_app(), DOCS_TOKEN)
    config = uvicorn.Config(guard, host="127.0.0.1", port=0, log_level="error", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(600):
        if server.started:
            break
        threading.Event().wait(0.05)
    assert server.started, "the docs MCP server did not start"
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield DocsServer(f"http://127.0.0.1:{port}/mcp", guard)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture
def docs() -> Iterator[OAuthDocsServer]:
    """The test authorization server and the MCP server it guards (tests/mcp/oauth_server.py)."""
    with oauth_docs_server() as running:
        yield running
