"""``onebot``: QQ through a OneBot v11 HTTP API (NapCat, go-cqhttp, Lagrange …).

``send_group_msg`` / ``send_private_msg`` for text, image, voice and the custom ``sticker`` type
(a QQ face id, or an image sent as a sticker); ``upload_group_file`` / ``upload_private_file`` for
``file``. So QQ needs no separate sticker or file tools.
"""

from __future__ import annotations

from typing import Any

from kernos.output._channel import Channel, ChannelConfig, ChannelError, Delivery, OutputContext
from kernos.output._parse import OutputItem
from kernos.output._texts import channel_text
from kernos.output.channels._common import (
    header_secrets,
    http_error,
    local_file,
    meta_object,
    post_json,
    unsupported,
)
from kernos.runtime import url_secrets

TYPES = ("text", "image", "voice", "file", "sticker")
_EXAMPLE = '{"group_id": 123456} or {"user_id": 654321, "reply_to": 42}'


def _media(payload: str) -> str:
    """A URL or ``base64://`` stays; a local path becomes a ``file://`` URI."""
    where = payload.strip()
    if "://" in where:
        return where
    return local_file(where).as_uri()


def _segments(item: OutputItem, reply_to: Any) -> list[dict[str, Any]]:
    if item.type == "text":
        segment: dict[str, Any] = {"type": "text", "data": {"text": item.payload}}
    elif item.type == "image":
        segment = {"type": "image", "data": {"file": _media(item.payload)}}
    elif item.type == "voice":
        segment = {"type": "record", "data": {"file": _media(item.payload)}}
    elif item.payload.strip().isdigit():  # sticker: a built-in QQ face by id
        segment = {"type": "face", "data": {"id": item.payload.strip()}}
    else:  # sticker: an image shown as a sticker (sub_type 1)
        segment = {"type": "image", "data": {"file": _media(item.payload), "sub_type": 1}}
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
    config.check_keys(("base_url", "access_token"), required=("base_url",))
    base_url = config.text("base_url")
    assert base_url is not None
    if not base_url.startswith(("http://", "https://")):
        raise config.error(
            "base_url", "must be an http:// or https:// URL", "e.g. http://127.0.0.1:3000"
        )
    token = config.text("access_token")
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def send(item: OutputItem, ctx: OutputContext) -> Delivery | None:
        if item.type not in TYPES:
            raise unsupported(item, TYPES)
        meta = meta_object(item, _EXAMPLE)
        key, target = _target(meta)
        scope = "group" if key == "group_id" else "private"
        if item.type == "file":
            path = local_file(item.payload)
            action = f"upload_{scope}_file"
            body: dict[str, Any] = {key: target, "file": str(path), "name": path.name}
        else:
            action = f"send_{scope}_msg"
            body = {key: target, "message": _segments(item, meta.get("reply_to"))}
        response = await post_json(
            f"{base_url.rstrip('/')}/{action}", body, headers=headers, timeout=30.0
        )
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
    )
