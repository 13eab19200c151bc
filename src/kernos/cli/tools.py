"""``kernos tools``: every tool an agent would get, with its source and a one-line description."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated

import typer

from kernos.cli._common import EXIT_OK, ConfigOption, config_errors, err, write_stdout

if TYPE_CHECKING:
    from kernos.runtime import Config, Permissions


async def _mcp_rows(config: Config, agent: str, permissions: Permissions) -> list[dict[str, str]]:
    """The agent's MCP tools, one row each (``source`` is ``mcp:SERVER``); the servers are
    started to read their lists and stopped again."""
    from kernos.tools import McpAgentToolset

    async with McpAgentToolset(config) as servers:
        specs = await servers.tools(SimpleNamespace(agent=agent, tools={}))
    rows = []
    for spec in specs:
        first = " ".join(spec.description.split()).split(". ", 1)[0].rstrip(".")
        rows.append(
            {
                "name": spec.name,
                "source": f"mcp:{spec.name.split('__', 1)[0]}",
                "rule": permissions.decision(agent, spec).rule,
                "description": first if len(first) <= 100 else first[:97] + "...",
            }
        )
    return rows


def register(app: typer.Typer) -> None:
    @app.command("tools")
    def tools_command(
        agent: Annotated[str, typer.Option("--agent", "-a", help="Agent to list.")] = "main",
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """List the tools an agent gets (built-in, functions, plugins, MCP servers) with their
        source; configured MCP servers are started to read their lists."""
        from kernos.runtime import Permissions, load_config
        from kernos.tools import load_catalog

        with config_errors():
            loaded = load_config(config)
            loaded.agent(agent)
            entries = load_catalog(loaded).for_agent(agent)
        permissions = Permissions(loaded)
        rows = [
            {
                "name": e.spec.name,
                "source": e.source,
                "rule": permissions.decision(agent, e.spec).rule,
                "description": e.summary,
            }
            for e in entries
        ]
        from kernos._check import session_tools

        rows += [
            {
                "name": name,
                "source": source,
                "rule": permissions.rule_of(agent, name),
                "description": f"({source}: kernos run, a parent that may spawn, a team)",
            }
            for name, source in session_tools()
        ]
        if loaded.mcp:
            import asyncio

            with config_errors():
                rows += asyncio.run(_mcp_rows(loaded, agent, permissions))
        if as_json:
            write_stdout(json.dumps({"agent": agent, "tools": rows}, ensure_ascii=False))
        elif rows:
            from kernos.cli._table import table

            header = ("NAME", "SOURCE", "RULE", "DESCRIPTION")
            body = [(r["name"], r["source"], r["rule"], r["description"]) for r in rows]
            write_stdout(table(header, body))
        err.print(
            f"{len(rows)} tool(s) for agent {agent}, run or spawned as a child (the task tools "
            "where it may spawn, the team tools in a team); `kernos run` adds the output tools "
            "of its allowed channels, a parent's `task` call the tools it grants.",
            markup=False,
        )
        raise typer.Exit(EXIT_OK)
