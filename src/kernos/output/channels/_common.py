"""What the built-in kinds share: the unsupported-type error, reading meta, posting JSON.

Third-party exceptions (httpx2) are translated into :class:`ChannelError` here, in one place. Files
and URLs a model names are not opened here: every kind asks its ``ChannelConfig.workspace``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kernos.output._channel import ChannelError
from kernos.output._parse import OutputItem
from kernos.runtime import scrub_text

if TYPE_CHECKING:
    import asyncio

    import httpx2


def unsupported(item: OutputItem, types: tuple[str, ...]) -> ChannelError:
    return ChannelError(f"unsupported type {item.type!r}; this channel sends: {', '.join(types)}")


def meta_object(item: OutputItem, example: str) -> dict[str, Any]:
    """The item's meta as a JSON object (absent: empty).

    Raises:
        ChannelError: the meta is not a JSON object; the message shows ``example``.
    """
    if item.meta is None or not item.meta.strip():
        return {}
    try:
        parsed = json.loads(item.meta)
    except json.JSONDecodeError as exc:
        raise ChannelError(
            f"meta is not valid JSON ({exc.msg} at character {exc.pos}); send an object like "
            f"{example}"
        ) from None
    if not isinstance(parsed, dict):
        raise ChannelError(f"meta must be a JSON object like {example}")
    return parsed


class HttpClient:
    """One pooled, keep-alive ``httpx2`` client for one channel: opened on the first request,
    closed by :meth:`aclose` (the channel's close hook, called by ``OutputKernel.aclose``).

    A new client per item cost ~24 ms of CPU, most of it loading the CA bundle; pooled, an item is
    well under a millisecond. The CA bundle is loaded only for an ``https://`` endpoint: a plain
    ``http://`` channel gets a TLS context with no trust anchors, which it never uses (redirects
    are not followed, so it cannot be sent to an ``https://`` URL either).

    Args:
        url: the endpoint (its scheme decides whether TLS is ever needed).
        timeout: seconds for each request (connect, read, write, pool).
    """

    def __init__(self, url: str, *, timeout: float) -> None:
        self.tls = url.startswith("https://")
        self.timeout = timeout
        self._client: httpx2.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _open(self) -> httpx2.AsyncClient:
        import asyncio  # a kind that posts runs in a loop; `kernos channels` starts none

        import httpx2  # ~0.1 s: `kernos channels` and the file kind never need it

        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            # connections belong to the loop that opened them; a client left on a finished loop
            # (a second asyncio.run without aclose) cannot be reused, so it is replaced
            if self.tls:
                self._client = httpx2.AsyncClient(timeout=self.timeout)
            else:
                import ssl

                no_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no CA bundle: never speaks TLS
                self._client = httpx2.AsyncClient(timeout=self.timeout, verify=no_tls)
            self._loop = loop
        return self._client

    async def post_json(
        self, url: str, body: Any, *, headers: Mapping[str, str]
    ) -> httpx2.Response:
        """POST ``body`` as JSON; connection problems become :class:`ChannelError`."""
        client = self._open()
        import httpx2

        try:
            return await client.post(url, json=body, headers=dict(headers))
        except httpx2.TimeoutException:
            raise ChannelError(
                f"no answer within {self.timeout:g} s; the receiver may be down"
            ) from None
        except httpx2.HTTPError as exc:
            raise ChannelError(
                f"could not reach the receiver ({type(exc).__name__}); check that it is running"
            ) from None

    async def aclose(self) -> None:
        """Close the pooled connections; the next request opens a new client."""
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.aclose()


def http_error(response: httpx2.Response) -> ChannelError:
    """``HTTP <status>: <first 200 characters of the body>``, scrubbed before it is cut (a
    token cut in half is no longer a value the scrubber can recognise)."""
    return ChannelError(f"HTTP {response.status_code}: {scrub_text(response.text)[:200]}")


def header_secrets(headers: Mapping[str, str]) -> tuple[str, ...]:
    """Header values, and the token part of ``Bearer <token>``-style values."""
    out: list[str] = []
    for value in headers.values():
        out.append(value)
        out.extend(part for part in value.split() if len(part) >= 8)
    return tuple(out)
