"""``kernos run``: one prompt to an agent; the final answer alone on stdout."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernos.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    ConfigOption,
    ModelOption,
    config_errors,
    err,
    fail,
    open_runtime,
    write_stdout,
)

if TYPE_CHECKING:
    from kernos.runtime import SessionEvent


def activity(event: SessionEvent) -> None:
    """Tool activity on stderr, one short line each."""
    who = event.agent if event.agent == "main" else f"{event.agent}/{event.session_id}"
    if event.kind == "tool_call":
        args = json.dumps(event.data.get("args"), ensure_ascii=False, default=str)
        if len(args) > 160:
            args = args[:157] + "..."
        err.print(f"[dim]{who}[/] → {event.data['name']} {args}", markup=True, highlight=False)
    elif event.kind == "tool_result":
        result = event.data["result"]
        first = result.text.strip().splitlines()[0] if result.text.strip() else ""
        if len(first) > 160:
            first = first[:157] + "..."
        mark = f"[red]✗ {result.code}[/]" if result.is_error else "[green]✓[/]"
        err.print(f"[dim]{who}[/] {mark} {first}", markup=True, highlight=False)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_command(
        prompt: Annotated[str, typer.Argument(help="What to ask the agent; '-' reads stdin.")],
        model: ModelOption = None,
        agent: Annotated[str, typer.Option("--agent", "-a", help="Agent to run.")] = "main",
        config: ConfigOption = None,
        record: Annotated[
            Path | None, typer.Option("--record", help="Write the model's turns to a cassette.")
        ] = None,
        no_wait: Annotated[
            bool,
            typer.Option("--no-wait", help="Exit at the first idle; unfinished children are lost."),
        ] = False,
        quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help="No activity on stderr.")
        ] = False,
    ) -> None:
        """Run an agent on PROMPT: the final answer goes to stdout, activity to stderr."""
        from kernos._app import run_agent

        if prompt == "-":
            prompt = sys.stdin.read()
        if not prompt.strip():
            raise fail("PROMPT is empty; pass what the agent should do")
        runtime = open_runtime(config, model, record)
        try:
            with config_errors():
                runtime.config.agent(agent)
                runtime.model(runtime.model_name(agent))
                outcome = asyncio.run(
                    run_agent(
                        runtime,
                        prompt,
                        agent=agent,
                        wait=not no_wait,
                        on_event=None if quiet else activity,
                    )
                )
        finally:
            runtime.close()
        if outcome.text:
            write_stdout(outcome.text)
        if outcome.error:
            raise fail(f"the run failed: {outcome.error}", EXIT_FAILED)
        raise typer.Exit(EXIT_OK)
