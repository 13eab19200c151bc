"""A stdio MCP server for the tests (the SDK's ``MCPServer``, once FastMCP): long calls that report
progress, and tools that ask the user something (elicitation, form and URL mode).

- ``long_job(steps, every)``: a progress notification every ``every`` seconds, ``steps`` times,
  then ``long job done``.
- ``forever(every)``: a progress notification every ``every`` seconds, never an answer.
- ``silent(seconds)``: answers after ``seconds`` without a word in between.
- ``ask_name()``: a form (``name`` with a default, ``color`` from an enum); answers what came back.
- ``ask_url()``: a URL-mode elicitation; answers the action.
"""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

server = MCPServer("progress-and-questions")


@server.tool()
async def long_job(steps: int, every: float, ctx: Context) -> str:
    """Works for ``steps × every`` seconds, reporting each step."""
    for step in range(1, steps + 1):
        await anyio.sleep(every)
        await ctx.report_progress(step, steps, f"step {step}")
    return "long job done"


@server.tool()
async def forever(every: float, ctx: Context) -> str:
    """Reports progress and never finishes."""
    step = 0
    while True:
        await anyio.sleep(every)
        step += 1
        await ctx.report_progress(step, None, "still going")


@server.tool()
async def silent(seconds: float) -> str:
    """Answers after ``seconds``, saying nothing meanwhile."""
    await anyio.sleep(seconds)
    return "silent done"


class Preferences(BaseModel):
    name: str = Field(default="Ada", description="Your name")
    color: str = Field(
        default="green",
        description="Favourite colour",
        json_schema_extra={"enum": ["red", "green", "blue"]},
    )


@server.tool()
async def ask_name(ctx: Context) -> str:
    """Asks the user for a name and a colour."""
    answer = await ctx.elicit("Who are you?", Preferences)
    if answer.action == "accept":
        return f"accepted name={answer.data.name} color={answer.data.color}"
    return f"elicitation {answer.action}"


@server.tool()
async def ask_url(ctx: Context) -> str:
    """Sends the user to a URL."""
    answer = await ctx.elicit_url(
        "Sign in to continue", "https://example.invalid/connect?x=1", "elicit-1"
    )
    return f"url elicitation {answer.action}"


if __name__ == "__main__":
    server.run()
