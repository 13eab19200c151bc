"""What the built-in kinds share: the unsupported-type error, reading meta, posting JSON.

Third-party exceptions (httpx) are translated into :class:`ChannelError` here, in one place. Files
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
    import httpx


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


async def post_json(
    url: str, body: Any, *, headers: Mapping[str, str], timeout: float
) -> httpx.Response:
    """POST ``body`` as JSON; connection problems become :class:`ChannelError`."""
    import httpx  # ~0.1 s with its CLI; `kernos channels` and the file kind never need it

    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            return await client.post(url, json=body, headers=dict(headers))
    except httpx.TimeoutException:
        raise ChannelError(f"no answer within {timeout:g} s; the receiver may be down") from None
    except httpx.HTTPError as exc:
        raise ChannelError(
            f"could not reach the receiver ({type(exc).__name__}); check that it is running"
        ) from None


def http_error(response: httpx.Response) -> ChannelError:
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
