"""``compress`` over MCP: the audited protocol on a workspace file (in process, SDK client)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client

from kernos._serve import KernosMcpServer, compress_description
from kernos.runtime import Runtime
from kernos.testing import FakeOpenAIServer
from tests.compress.conftest import approving_agent, loss
from tests.serve.test_stdio import only_text


@asynccontextmanager
async def connect(project: Path) -> AsyncIterator[Client]:
    """In process (an anyio task group must end in the task that started it: not a fixture)."""
    runtime = Runtime.open(project / "kernos.toml", cwd=project)
    served = KernosMcpServer(runtime)
    try:
        async with Client(served.server, mode="legacy") as connected:
            yield connected
    finally:
        await served.aclose()
        runtime.close()


async def test_an_approved_draft_is_written_and_reported(
    project: Path, model: FakeOpenAIServer
) -> None:
    losses = [loss("Please", "politeness")]
    model.script(*approving_agent(str(project / "prompt.md"), "Answer briefly.", losses))
    async with connect(project) as client:
        result = await client.call_tool("compress", {"path": "prompt.md", "rounds": ""})
    said = only_text(result)
    assert not result.is_error, said
    lines = said.splitlines()
    assert lines[0] == f"compress {project / 'prompt.md'}: approved after 1 round(s)"
    assert lines[1].startswith("metrics: ") and "% smaller)" in lines[1]
    assert lines[2:4] == ["declared losses:", "- Please (politeness)"]
    assert lines[4] == f"written: {project / 'prompt.md'}"
    assert (project / "prompt.md").read_text() == "Answer briefly.\n"


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        ("/etc/hostname", "is outside the workspace"),
        ("kernos.toml", "is kernos's own state or configuration"),
        ("missing.md", "does not exist"),
    ],
)
async def test_a_path_the_workspace_refuses_is_an_error_result_and_nothing_runs(
    project: Path, model: FakeOpenAIServer, path: str, refusal: str
) -> None:
    async with connect(project) as client:
        result = await client.call_tool("compress", {"path": path})
    assert result.is_error
    assert only_text(result).startswith("compress path refused: ")
    assert refusal in only_text(result)
    assert model.requests == []


def test_the_description_size_is_pinned() -> None:
    assert len(compress_description()) == 506  # the model-facing text's size, pinned
