"""``webhook``: POSTs ``{"channel", "type", "payload", "meta"}`` as JSON; any type is forwarded and
the receiver decides. A non-2xx answer fails the item with ``HTTP <status>: <body[:200]>``; ``202
Accepted`` is reported as queued, not as delivered."""

from __future__ import annotations

from kernos.output._channel import Channel, ChannelConfig, Delivery, OutputContext
from kernos.output._parse import OutputItem
from kernos.output._texts import channel_text
from kernos.output.channels._common import HttpClient, header_secrets, http_error
from kernos.runtime import url_secrets


def webhook_channel(config: ChannelConfig) -> Channel:
    config.check_keys(("url", "headers", "timeout"), required=("url",))
    url = config.text("url")
    assert url is not None
    if not url.startswith(("http://", "https://")):
        raise config.error("url", "must be an http:// or https:// URL", 'write url = "https://..."')
    headers = config.table("headers")
    timeout = config.number("timeout", 10.0)
    http = HttpClient(url, timeout=timeout)

    async def send(item: OutputItem, ctx: OutputContext) -> Delivery | None:
        body = {
            "channel": ctx.channel,
            "type": item.type,
            "payload": item.payload,
            "meta": item.meta,
        }
        response = await http.post_json(url, body, headers=headers)
        if response.status_code == 202:
            return Delivery.queued("accepted by the receiver (HTTP 202), delivery not confirmed")
        if not response.is_success:
            raise http_error(response)
        return None

    description, meta = channel_text("webhook")
    # Slack/Discord-style URLs carry their token in the path or query: it is a secret too
    secrets = (*header_secrets(headers), *url_secrets(url))
    return Channel(
        config.name,
        send,
        description,
        (),
        meta,
        kind=config.kind,
        secrets=secrets,
        aclose=http.aclose,
    )
