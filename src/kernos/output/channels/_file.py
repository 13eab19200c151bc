"""``file``: appends one JSON line per message — ``{"time", "channel", "type", "payload", "meta"}``.

It keeps text: ``text`` and ``markdown`` as given, ``json`` only when the payload parses as JSON.
Media types are refused (a log line is not a delivered image).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from kernos.output._channel import Channel, ChannelConfig, ChannelError, OutputContext
from kernos.output._parse import OutputItem
from kernos.output._texts import channel_text
from kernos.output.channels._common import unsupported

TYPES = ("text", "markdown", "json")


def file_channel(config: ChannelConfig) -> Channel:
    config.check_keys(("path",), required=("path",))
    path = config.path("path")
    assert path is not None  # required above

    async def send(item: OutputItem, ctx: OutputContext) -> None:
        if item.type not in TYPES:
            raise unsupported(item, TYPES)
        if item.type == "json":
            try:
                json.loads(item.payload)
            except json.JSONDecodeError as exc:
                raise ChannelError(
                    f"payload is not valid JSON ({exc.msg} at character {exc.pos}); fix it or "
                    "send it as type text"
                ) from None
        line = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "channel": ctx.channel,
            "type": item.type,
            "payload": item.payload,
            "meta": item.meta,
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise ChannelError(f"cannot write {path}: {exc.strerror or exc}") from None

    description, meta = channel_text("file")
    return Channel(config.name, send, description, TYPES, meta, kind=config.kind)
