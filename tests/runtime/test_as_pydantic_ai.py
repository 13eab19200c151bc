"""kernos tools on your own pydantic-ai ``Agent`` (:func:`kernos.runtime.as_pydantic_ai`): a call
goes through the boundary — padding dropped, a bad call answered with its code — over a real
OpenAI-compatible exchange with the fake server."""

from __future__ import annotations

import json

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from kernos.boundary import ToolContext, ToolResult, schema_tool
from kernos.runtime import as_pydantic_ai
from kernos.testing import FakeOpenAIServer, text, tool_call

SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"],
}


async def lookup(args: dict[str, object], ctx: ToolContext) -> str:
    return f"found {args.get('limit', 5)} for {args['query']!r}"


def tool_results(request: dict[str, object]) -> list[str]:
    return [
        str(m["content"])
        for m in request["messages"]  # type: ignore[attr-defined]
        if m.get("role") == "tool"
    ]


async def test_plain_specs_on_your_own_agent_go_through_the_boundary(
    server: FakeOpenAIServer,
) -> None:
    spec = schema_tool("lookup", "Look it up.", SCHEMA, lookup)  # as an MCP tool is offered
    seen: list[ToolResult] = []
    server.script(
        # padding: an empty string for an optional field, dropped (and named in the receipt)
        tool_call("lookup", json.dumps({"query": "kernos", "limit": ""})),
        tool_call("lookup", json.dumps({"limit": 2})),  # no query: the coded error
        text("done"),
    )
    model = OpenAIChatModel(
        "test", provider=OpenAIProvider(base_url=server.base_url, api_key="test-key")
    )
    agent = Agent(model, toolsets=[as_pydantic_ai([spec], on_result=lambda _id, r: seen.append(r))])
    result = await agent.run("look it up")
    assert result.output == "done"
    assert [r.is_error for r in seen] == [False, True], [r.text for r in seen]
    assert seen[0].text == "found 5 for 'kernos'"
    assert seen[0].repairs  # the padding the boundary dropped, named
    assert seen[1].code == "invalid_arguments"
    assert "found 5 for 'kernos'" in tool_results(server.requests[1])[0]
