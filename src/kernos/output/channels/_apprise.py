"""``apprise``: any Apprise URLs (~150 services). text/markdown/html are the body; image/file
payloads go as attachments: a path is read through the workspace policy and handed to Apprise as
bytes (Apprise never opens a path the model named); an ``http(s)://`` URL only with
``allow_url_attachments = true`` (Apprise then fetches it). The URLs carry tokens, so they are
secrets."""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import warnings
from pathlib import Path
from typing import Any

import apprise

with warnings.catch_warnings():
    # Apprise loads its PGP helper lazily on the first attachment, and that helper imports the
    # stdlib's deprecated ``imghdr`` (a DeprecationWarning on 3.11/3.12). Load it once, quietly.
    warnings.simplefilter("ignore", DeprecationWarning)
    import apprise.utils.pgp
from apprise.attachment.memory import AttachMemory

from kernos.output._channel import Channel, ChannelConfig, ChannelError, OutputContext
from kernos.output._parse import OutputItem
from kernos.output._texts import channel_text
from kernos.output.channels._common import meta_object, unsupported
from kernos.runtime import url_secrets

TYPES = ("text", "markdown", "html", "image", "file")
_FORMATS = {"text": "text", "markdown": "markdown", "html": "html"}
_EXAMPLE = '{"title": "Nightly build"}'


def apprise_channel(config: ChannelConfig) -> Channel:
    config.check_keys(("urls", "allow_url_attachments"), required=("urls",))
    urls = config.texts("urls")
    allow_urls = config.flag("allow_url_attachments", False)
    workspace = config.workspace
    if not urls:
        raise config.error("urls", "is empty", 'write urls = ["json://host/path", ...]')
    for number, url in enumerate(urls, 1):
        if not apprise.Apprise().add(url):
            raise config.error(
                "urls", f"entry {number} is not a URL Apprise understands", "see apprise docs"
            )
    secrets = url_secrets(*urls)

    def notify(**kwargs: Any) -> tuple[bool, list[str]]:
        notifier = apprise.Apprise()
        notifier.add(urls)
        with apprise.LogCapture(level=logging.WARNING) as captured:  # type: ignore[no-untyped-call]
            ok = bool(notifier.notify(**kwargs))
            lines = [line.strip() for line in captured.getvalue().splitlines() if line.strip()]
        return ok, lines

    async def send(item: OutputItem, ctx: OutputContext) -> None:
        if item.type not in TYPES:
            raise unsupported(item, TYPES)
        meta = meta_object(item, _EXAMPLE)
        title = str(meta.get("title") or "")
        kwargs: dict[str, Any] = {"title": title}
        if item.type in _FORMATS:
            kwargs.update(body=item.payload, body_format=_FORMATS[item.type])
        else:
            where = item.payload.strip()
            source = workspace.attachment_source(where, allow_urls=allow_urls)
            if isinstance(source, Path):
                path, data = workspace.read_attachment(source)
                mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                attachment: Any = AttachMemory(  # type: ignore[no-untyped-call]
                    content=data, name=path.name, mimetype=mime
                )
            else:
                attachment = source  # an opted-in URL: Apprise fetches it
            kwargs.update(body=str(meta.get("body") or title or where.rsplit("/", 1)[-1]))
            kwargs["attach"] = apprise.AppriseAttachment(attachment)
        ok, lines = await asyncio.to_thread(notify, **kwargs)
        if not ok:
            reason = lines[-1] if lines else "no reason given"
            raise ChannelError(f"Apprise could not deliver the message: {reason}")

    description, meta_help = channel_text("apprise")
    return Channel(
        config.name, send, description, TYPES, meta_help, kind=config.kind, secrets=secrets
    )
