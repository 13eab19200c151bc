"""``kernos tools``: every tool an agent would get, with its source and a one-line description."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from kernos.cli._common import EXIT_OK, ConfigOption, config_errors, err, write_stdout


def register(app: typer.Typer) -> None:
    @app.command("tools")
    def tools_command(
        agent: Annotated[str, typer.Option("--agent", "-a", help="Agent to list.")] = "main",
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """List the tools an agent gets (built-in, functions, plugins) with their source."""
        from kernos.runtime import load_config
        from kernos.tools import load_catalog

        with config_errors():
            loaded = load_config(config)
            loaded.agent(agent)
            entries = load_catalog(loaded).for_agent(agent)
        rows = [
            {"name": e.spec.name, "source": e.source, "description": e.summary} for e in entries
        ]
        if as_json:
            write_stdout(json.dumps({"agent": agent, "tools": rows}, ensure_ascii=False))
        elif rows:
            width = max(len(r["name"]) for r in rows)
            source = max(len(r["source"]) for r in rows)
            write_stdout(
                "\n".join(
                    f"{r['name']:<{width}}  {r['source']:<{source}}  {r['description']}"
                    for r in rows
                )
            )
        err.print(
            f"{len(rows)} tool(s) for agent {agent}; `kernos run` adds the task tools and the "
            "output tools of its allowed channels.",
            markup=False,
        )
        raise typer.Exit(EXIT_OK)
