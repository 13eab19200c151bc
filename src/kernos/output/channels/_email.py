"""``email``: one SMTP message per item; ``file``/``image`` payloads are paths sent as
attachments, read through the workspace policy; ``meta`` may name ``to`` (on the channel's
recipient allow-list) and ``subject``."""

from __future__ import annotations

import mimetypes
from email.message import EmailMessage
from typing import Any

import aiosmtplib

from kernos.output._channel import Channel, ChannelConfig, ChannelError, OutputContext
from kernos.output._parse import OutputItem
from kernos.output._texts import channel_text
from kernos.output.channels._common import meta_object, unsupported

TYPES = ("text", "markdown", "html", "image", "file")
_EXAMPLE = '{"to": "ana@example.org", "subject": "Build done"}'


def _recipients(value: Any) -> list[str]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) and "@" in v for v in values):
        raise ChannelError(f"meta `to` must be an address or a list of addresses, e.g. {_EXAMPLE}")
    return values


def email_channel(config: ChannelConfig) -> Channel:
    config.check_keys(
        ("host", "port", "username", "password", "starttls", "from", "to"), required=("from",)
    )
    host = config.text("host", "localhost")
    port = int(config.number("port", 25))
    username = config.text("username")
    password = config.text("password")
    starttls = config.flag("starttls", False)
    sender = config.text("from")
    default_to = config.texts("to")
    workspace = config.workspace

    async def send(item: OutputItem, ctx: OutputContext) -> None:
        if item.type not in TYPES:
            raise unsupported(item, TYPES)
        meta = meta_object(item, _EXAMPLE)
        to = _recipients(meta["to"]) if meta.get("to") else default_to
        if not to:
            raise ChannelError(f"no recipient: name `to` in meta, e.g. {_EXAMPLE}")
        message = EmailMessage()
        message["From"] = sender
        message["To"] = ", ".join(to)
        message["Subject"] = str(meta.get("subject") or f"Message from kernos [{ctx.channel}]")
        if item.type in ("image", "file"):
            path, data = workspace.read_attachment(item.payload)
            message.set_content(f"Attached: {path.name}")
            mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            main, _, sub = mime.partition("/")
            message.add_attachment(data, maintype=main, subtype=sub, filename=path.name)
        elif item.type == "html":
            message.set_content("This message is HTML; open it in a mail reader that shows HTML.")
            message.add_alternative(item.payload, subtype="html")
        else:
            message.set_content(item.payload)
        try:
            await aiosmtplib.send(
                message,
                hostname=host,
                port=port,
                username=username,
                password=password,
                start_tls=starttls,
                timeout=30,
            )
        except aiosmtplib.SMTPAuthenticationError as exc:
            raise ChannelError(
                f"the SMTP server refused the login ({exc.code}); check username and password"
            ) from None
        except aiosmtplib.SMTPRecipientsRefused:
            raise ChannelError(f"the SMTP server refused the recipients: {', '.join(to)}") from None
        except aiosmtplib.SMTPConnectError:
            raise ChannelError(f"cannot reach the SMTP server at {host}:{port}") from None
        except aiosmtplib.SMTPException as exc:
            raise ChannelError(f"SMTP error: {exc}") from None
        except OSError as exc:
            raise ChannelError(f"cannot reach the SMTP server at {host}:{port} ({exc})") from None

    description, meta_help = channel_text("email")
    return Channel(
        config.name,
        send,
        description,
        TYPES,
        meta_help,
        kind=config.kind,
        recipient_keys=("to",),
        default_recipients=tuple(default_to),
        secrets=(password,) if password else (),
    )
