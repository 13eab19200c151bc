"""``onebot``: QQ through a OneBot v11 HTTP API (NapCat, go-cqhttp, Lagrange …).

``send_group_msg`` / ``send_private_msg`` for text, image, voice and the custom ``sticker`` type
(a QQ face id, or an image sent as a sticker); ``upload_group_file`` / ``upload_private_file`` for
``file``. So QQ needs no separate sticker or file tools. Media paths (and ``file://``) go through
the workspace policy; ``base64://`` data passes; ``http(s)://`` URLs only with
``allow_url_attachments = true`` (the OneBot server fetches them). ``group_id`` / ``user_id`` are
checked against the recipient allow-list by the kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernos.output._channel import Channel, ChannelConfig, ChannelError, Delivery, OutputContext
from kernos.output._parse import OutputItem
from kernos.output._texts import channel_text
from kernos.output.channels._common import (
    HttpClient,
    header_secrets,
    http_error,
    meta_object,
    unsupported,
)
from kernos.runtime import WorkspacePolicy, url_secrets

TYPES = ("text", "image", "voice", "file", "sticker")
_EXAMPLE = '{"group_id": 123456} or {"user_id": 654321, "reply_to": 42}'


class _Media:
    """Media payloads through the workspace policy: a checked local file becomes a ``file://``
    URI, ``base64://`` data stays, a URL stays only when the channel allows URL attachments."""

    def __init__(self, workspace: WorkspacePolicy, allow_urls: bool) -> None:
        self.workspace = workspace
        self.allow_urls = allow_urls

    def __call__(self, payload: str) -> str:
        source = self.workspace.attachment_source(
            payload, allow_urls=self.allow_urls, data_schemes=("base64",)
        )
        return source.as_uri() if isinstance(source, Path) else source


def _segments(item: OutputItem, reply_to: Any, media: _Media) -> list[dict[str, Any]]:
    if item.type == "text":
        segment: dict[str, Any] = {"type": "text", "data": {"text": item.payload}}
    elif item.type == "image":
        segment = {"type": "image", "data": {"file": media(item.payload)}}
    elif item.type == "voice":
        segment = {"type": "record", "data": {"file": media(item.payload)}}
    elif item.payload.strip().isdigit():  # sticker: a built-in QQ face by id
        segment = {"type": "face", "data": {"id": item.payload.strip()}}
    else:  # sticker: an image shown as a sticker (sub_type 1)
        segment = {"type": "image", "data": {"file": media(item.payload), "sub_type": 1}}
    reply = [{"type": "reply", "data": {"id": str(reply_to)}}] if reply_to not in (None, "") else []
    return [*reply, segment]


def _target(meta: dict[str, Any]) -> tuple[str, int]:
    for key in ("group_id", "user_id"):
        value = meta.get(key)
        if value in (None, ""):
            continue
        if isinstance(value, bool) or not str(value).strip().isdigit():
            raise ChannelError(f"meta `{key}` must be a number, e.g. {_EXAMPLE}")
        return key, int(str(value).strip())
    raise ChannelError(f"meta must name group_id or user_id, e.g. {_EXAMPLE}")


def onebot_channel(config: ChannelConfig) -> Channel:
    config.check_keys(("base_url", "access_token", "allow_url_attachments"), required=("base_url",))
    base_url = config.text("base_url")
    assert base_url is not None
    if not base_url.startswith(("http://", "https://")):
        raise config.error(
            "base_url", "must be an http:// or https:// URL", "e.g. http://127.0.0.1:3000"
        )
    token = config.text("access_token")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    media = _Media(config.workspace, config.flag("allow_url_attachments", False))
    http = HttpClient(base_url, timeout=30.0)

    async def send(item: OutputItem, ctx: OutputContext) -> Delivery | None:
        if item.type not in TYPES:
            raise unsupported(item, TYPES)
        meta = meta_object(item, _EXAMPLE)
        key, target = _target(meta)
        scope = "group" if key == "group_id" else "private"
        if item.type == "file":
            path = config.workspace.attachment(item.payload)  # the OneBot server reads it
            action = f"upload_{scope}_file"
            body: dict[str, Any] = {key: target, "file": str(path), "name": path.name}
        else:
            action = f"send_{scope}_msg"
            body = {key: target, "message": _segments(item, meta.get("reply_to"), media)}
        response = await http.post_json(f"{base_url.rstrip('/')}/{action}", body, headers=headers)
        if response.status_code in (401, 403):
            raise ChannelError(
                f"the OneBot server refused the request (HTTP {response.status_code}); "
                "check access_token"
            )
        if not response.is_success:
            raise http_error(response)
        try:
            answer = response.json()
        except ValueError:
            raise ChannelError(f"OneBot {action}: the answer is not JSON") from None
        status = answer.get("status") if isinstance(answer, dict) else None
        if status == "ok":
            return None
        if status == "async":
            return Delivery.queued(f"OneBot {action} accepted it asynchronously")
        reason = ""
        if isinstance(answer, dict):
            reason = str(answer.get("wording") or answer.get("message") or answer.get("msg") or "")
            retcode = answer.get("retcode")
        else:
            retcode = None
        raise ChannelError(f"OneBot {action} failed (retcode {retcode}): {reason or 'no reason'}")

    description, meta_help = channel_text("onebot")
    return Channel(
        config.name,
        send,
        description,
        TYPES,
        meta_help,
        kind=config.kind,
        recipient_keys=("user_id", "group_id"),
        secrets=header_secrets(headers) + ((token,) if token else ()) + url_secrets(base_url),
        aclose=http.aclose,
    )
