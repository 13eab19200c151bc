"""``console``: prints each message on stdout (or stderr), for trying an agent out."""

from __future__ import annotations

import sys

from kernos.output._channel import Channel, ChannelConfig, OutputContext
from kernos.output._parse import OutputItem
from kernos.output._texts import channel_text
from kernos.output.channels._common import unsupported

TYPES = ("text", "markdown")


def console_channel(config: ChannelConfig) -> Channel:
    config.check_keys(("stream",))
    stream = config.text("stream", "stdout")
    if stream not in ("stdout", "stderr"):
        raise config.error("stream", "must be stdout or stderr", 'write stream = "stdout"')

    async def send(item: OutputItem, ctx: OutputContext) -> None:
        if item.type not in TYPES:
            raise unsupported(item, TYPES)
        out = sys.stdout if stream == "stdout" else sys.stderr
        out.write(f"[{ctx.channel}] {item.payload}\n")
        out.flush()

    description, meta = channel_text("console")
    return Channel(config.name, send, description, TYPES, meta, kind=config.kind)
