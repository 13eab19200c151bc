"""The same refusal over ``kernos mcp`` (a host's model calls the same ``task`` tool): a child's
``model`` that configuration does not name is ``model_not_allowed`` and nothing is opened or
spawned."""

from __future__ import annotations

from pathlib import Path

from mcp import Client, StdioServerParameters
from tests.serve.conftest import KERNOS, server_env

from kernos.runtime import Store
from kernos.tasks import TaskStore
from kernos.testing import FakeOpenAIServer


async def test_a_hosts_model_cannot_name_a_file_or_a_provider_for_a_child(
    project: Path, server: FakeOpenAIServer
) -> None:
    params = StdioServerParameters(
        command=KERNOS, args=["mcp"], env=server_env(project, server), cwd=str(project)
    )
    async with Client(params) as client:
        for model in ("replay:/etc/passwd", "replay:/dev/zero", "openai:gpt-4o-mini"):
            refused = await client.call_tool(
                "task", {"prompt": "x", "subagent_type": "explore", "model": model}
            )
            assert refused.is_error
            (block,) = refused.content
            assert block.type == "text"
            assert block.text == (
                f'The model "{model}" cannot be chosen for a child task; nothing was spawned. '
                "Allowed models: openai-chat:test. Or leave model out: the child then runs on "
                "its agent's configured model."
            )
    assert server.requests == []
    store = Store.open(project / ".kernos")
    try:
        assert TaskStore(store).recent() == []
    finally:
        store.close()
