"""``kernos send`` and ``kernos channels``: the output kernel from the command line.

``kernos send`` goes through the same parse, gate, stages and receipt as a model's call; the receipt
goes to stdout. Exit 0 when every item was sent, 1 otherwise, 2 on a rejected call.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from kernos.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ConfigOption,
    config_errors,
    enable_file_log,
    err,
    write_stdout,
)


def _one_or_many(values: list[str] | None) -> str | list[str] | None:
    """One value is the single path (a string); several are an array."""
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def register(app: typer.Typer) -> None:
    @app.command("send")
    def send_command(
        channel: Annotated[str, typer.Argument(help="The channel to send through.")],
        payload: Annotated[
            list[str], typer.Argument(help="The message; several send several, in order.")
        ],
        type_: Annotated[
            list[str] | None,
            typer.Option("--type", "-t", help="Type: once for all, or once per payload."),
        ] = None,
        meta: Annotated[
            list[str] | None,
            typer.Option("--meta", help="Meta (text or JSON): once for all, or once per payload."),
        ] = None,
        agent: Annotated[
            str, typer.Option("--agent", "-a", help="Send as this agent (its allowed_outputs).")
        ] = "main",
        config: ConfigOption = None,
    ) -> None:
        """Send PAYLOAD... through CHANNEL as AGENT would; print the receipt."""
        from kernos.output import OutputKernel
        from kernos.runtime import load_config

        with config_errors():
            loaded = load_config(config)
            loaded.agent(agent)
            kernel = OutputKernel.from_config(loaded)
        enable_file_log(loaded.home)
        receipt = asyncio.run(
            kernel.send(
                channel, _one_or_many(payload), _one_or_many(type_), _one_or_many(meta), agent=agent
            )
        )
        write_stdout(receipt.text)
        if receipt.rejected:
            raise typer.Exit(EXIT_USAGE)
        raise typer.Exit(EXIT_OK if receipt.all_sent else EXIT_FAILED)

    @app.command("channels")
    def channels_command(config: ConfigOption = None) -> None:
        """List the configured output channels: name, kind and description."""
        from kernos.output import OutputKernel, channel_line
        from kernos.runtime import load_config

        with config_errors():
            kernel = OutputKernel.from_config(load_config(config), hooks=())
        if not kernel.channels:
            err.print("no channels configured; add a [channels.NAME] table to kernos.toml")
            raise typer.Exit(EXIT_OK)
        write_stdout("\n".join(channel_line(c) for c in kernel.channels.values()))
        raise typer.Exit(EXIT_OK)
