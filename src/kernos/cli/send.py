"""``kernos send`` and ``kernos channels``: the output kernel from the command line.

``kernos send`` goes through the same parse, gate, stages and receipt as a model's call; the receipt
goes to stdout. Exit 0 when every item was sent, 1 otherwise, 2 on a rejected call, whose reason
goes to stderr worded for a person at a shell (the model's wording points at model tools).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kernos.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ConfigOption,
    config_errors,
    enable_file_log,
    err,
    fail,
    write_stdout,
)
from kernos.cli._table import one_line, table

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from kernos.output import OutputKernel, OutputReceipt


def _repeat_error(flag: str, given: list[str] | None, payloads: int) -> str | None:
    """Why ``--type``/``--meta``, repeated this often, cannot pair with the payloads (or None)."""
    count = len(given or ())
    if count in (0, 1, payloads):
        return None
    noun = "payload" if payloads == 1 else "payloads"
    return (
        f"{flag} was given {count} times for {payloads} {noun}; give it once for all payloads "
        "or once per payload"
    )


def _rejection(receipt: OutputReceipt, agent: str) -> str:
    """A rejected call's reason for a person: the gate's model wording names model tools."""
    if receipt.code == "unknown_channel":
        return (
            f"channel [{receipt.channel}] does not exist or is unavailable; "
            "run `kernos channels` to list the configured channels"
        )
    if receipt.code == "not_authorized":
        return (
            f"channel [{receipt.channel}] is not authorized for agent {agent} (its "
            "allowed_outputs in kernos.toml); send as another --agent or allow the channel there"
        )
    return receipt.text


def _one_or_many(values: list[str] | None) -> str | list[str] | None:
    """One value is the single path (a string); several are an array. Arguments that were not
    valid UTF-8 (Python keeps their bytes as lone surrogates) are cleaned like model text."""
    if not values:
        return None
    from kernos.boundary import clean_text

    cleaned = [clean_text(v) for v in values]
    return cleaned[0] if len(cleaned) == 1 else cleaned


async def _send_and_close(kernel: OutputKernel, sending: Awaitable[OutputReceipt]) -> OutputReceipt:
    """The send, then the channels closed on the same loop (their pooled connections)."""
    async with kernel:
        return await sending


def receipt_record(receipt: OutputReceipt, error: str | None = None) -> dict[str, Any]:
    """A receipt as the ``kernos send --json`` document (keys documented in the README)."""
    return {
        "channel": receipt.channel,
        "text": receipt.text,
        "code": receipt.code,
        "error": error,
        "all_sent": receipt.all_sent,
        "sent": receipt.sent,
        "total": receipt.total,
        "items": [o.record() for o in receipt.items],
    }


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
        as_json: Annotated[bool, typer.Option("--json", help="The receipt as JSON.")] = False,
    ) -> None:
        """Send PAYLOAD... through CHANNEL as AGENT would; print the receipt."""
        from kernos.output import OutputKernel
        from kernos.runtime import load_config

        with config_errors():
            loaded = load_config(config)
            loaded.agent(agent)
            kernel = OutputKernel.from_config(loaded)
        enable_file_log(loaded.home)
        for flag, given in (("--type", type_), ("--meta", meta)):
            if (problem := _repeat_error(flag, given, len(payload))) is not None:
                raise fail(problem)
        import asyncio

        receipt = asyncio.run(
            _send_and_close(
                kernel,
                kernel.send(
                    channel,
                    _one_or_many(payload),
                    _one_or_many(type_),
                    _one_or_many(meta),
                    agent=agent,
                ),
            )
        )
        if receipt.rejected:
            reason = _rejection(receipt, agent)
            if as_json:
                write_stdout(json.dumps(receipt_record(receipt, reason), ensure_ascii=False))
            raise fail(reason, EXIT_USAGE)
        if as_json:
            write_stdout(json.dumps(receipt_record(receipt), ensure_ascii=False))
        else:
            write_stdout(receipt.text)
        raise typer.Exit(EXIT_OK if receipt.all_sent else EXIT_FAILED)

    @app.command("channels")
    def channels_command(
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """List the configured output channels: name, kind, types and description."""
        from kernos.output import read_channels  # only [channels]: no config models to build

        with config_errors():
            channels = read_channels(config)
        rows: list[dict[str, Any]] = [
            {
                "name": c.name,
                "kind": c.kind,
                "types": list(c.types),
                "description": c.description.strip(),
            }
            for c in channels.values()
        ]
        if as_json:
            write_stdout(json.dumps({"channels": rows}, ensure_ascii=False))
            raise typer.Exit(EXIT_OK)
        if not rows:
            err.print("no channels configured; add a [channels.NAME] table to kernos.toml")
            raise typer.Exit(EXIT_OK)
        header = ("NAME", "KIND", "TYPES", "DESCRIPTION")
        body = [
            (
                c.name,
                c.kind or "-",
                ", ".join(c.types) or "-",
                one_line(c.description, 80),
            )
            for c in channels.values()
        ]
        write_stdout(table(header, body))
        raise typer.Exit(EXIT_OK)
