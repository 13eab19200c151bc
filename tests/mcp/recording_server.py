"""A stdio MCP server for the tests: records every ``tools/call`` it receives, as sent.

Built on the SDK's low-level server so the arguments are recorded exactly as they arrive on the
wire (no server-side validation or coercion). ``RECORD_FILE`` names the JSON-lines file.

Hostile extras for the limit tests: ``RECORDER_EXTRAS=1`` adds ``big`` (``bytes`` of text),
``structured`` (``bytes`` of structured content only), ``say`` (answers ``text`` verbatim) and
three tools whose schemas are too big or too deep (``wide``, ``enum``, ``deep``);
``RECORDER_JUNK=N`` prints N lines that are not MCP messages on stdout before serving.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

LOOKUP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look up."},
        "limit": {"type": "integer", "description": "How many results."},
        "exact": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "mode": {"type": "string", "enum": ["fast", "full"]},
        "since": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
        "note": {"type": "string"},
        "filters": {
            "type": "object",
            "properties": {"field": {"type": "string"}, "value": {"type": "string"}},
            "required": ["field"],
            "additionalProperties": False,
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}

TOOLS = [
    types.Tool(name="lookup", description="Look something up.", input_schema=LOOKUP_SCHEMA),
    types.Tool(
        name="fail",
        description="Always reports an error.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="slow",
        description="Answers after `seconds`.",
        input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
    ),
]


def _deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


SIZE_SCHEMA = {"type": "object", "properties": {"bytes": {"type": "integer"}}}
EXTRAS = [
    types.Tool(name="big", description="Answers `bytes` of text.", input_schema=SIZE_SCHEMA),
    types.Tool(
        name="structured",
        description="Answers `bytes` of structured content.",
        input_schema=SIZE_SCHEMA,
    ),
    types.Tool(
        name="say",
        description="Answers `text` verbatim.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
    ),
    types.Tool(
        name="wide",
        description="10,000 properties.",
        input_schema={
            "type": "object",
            "properties": {f"field_{i}": {"type": "string"} for i in range(10_000)},
        },
    ),
    types.Tool(
        name="enum",
        description="A 200,000-value enum.",
        input_schema={
            "type": "object",
            "properties": {"pick": {"type": "string", "enum": [f"v{i}" for i in range(200_000)]}},
        },
    ),
    types.Tool(name="deep", description="40 levels deep.", input_schema=_deep_schema(40)),
]
if os.environ.get("RECORDER_EXTRAS"):
    TOOLS = TOOLS + EXTRAS


def record(name: str, arguments: Any) -> None:
    with open(os.environ["RECORD_FILE"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"tool": name, "arguments": arguments, "pid": os.getpid()}) + "\n")


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    record(params.name, params.arguments)
    if params.name == "fail":
        return types.CallToolResult(
            content=[types.TextContent(text="the index is offline")], is_error=True
        )
    arguments = params.arguments or {}
    if params.name == "big":
        return types.CallToolResult(content=[types.TextContent(text="x" * arguments["bytes"])])
    if params.name == "structured":
        return types.CallToolResult(
            content=[], structured_content={"data": "y" * arguments["bytes"]}
        )
    if params.name == "say":
        return types.CallToolResult(content=[types.TextContent(text=arguments["text"])])
    if params.name == "slow":
        await anyio.sleep(float((params.arguments or {}).get("seconds", 30)))
        return types.CallToolResult(content=[types.TextContent(text="finally")])
    answer = f"found 3 entries for {(params.arguments or {}).get('query')!r}"
    return types.CallToolResult(
        content=[types.TextContent(text=answer)],
        structured_content={"count": 3, "arguments": params.arguments},
    )


server: Server[Any] = Server("recorder", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    for i in range(int(os.environ.get("RECORDER_JUNK", "0"))):
        sys.stdout.write(f"junk line {i}: not an MCP message\n")
    sys.stdout.flush()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
