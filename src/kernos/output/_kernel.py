"""The output kernel: the gate once per call, then :meth:`OutputKernel.send_one` for every item.

``send_one`` is its own function and runs the whole sequence — ``before_output`` hooks, safe
backfill, the recipient allow-list, the handler, ``after_output`` hooks — for each item; a batch
is a loop over it, never a copy of its stages, so no stage can be skipped for item 2..N. A failed
item never stops the items after it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kernos.errors import OutputBlocked as OutputBlocked
from kernos.output._channel import (
    Channel,
    ChannelError,
    Delivery,
    InboundMessage,
    OutputContext,
    SendStatus,
)
from kernos.output._hooks import OutputHook
from kernos.output._parse import (
    DEFAULT_MAX_ITEMS,
    OutputArgumentError,
    OutputItem,
    parse_output_items,
)
from kernos.output._receipt import ItemOutcome, OutputReceipt
from kernos.output._registry import build_channels, load_hooks
from kernos.runtime import WorkspaceRefused, register_secrets, scrub_text

if TYPE_CHECKING:
    from kernos.runtime import Config

logger = logging.getLogger("kernos.output")

_SENT = SendStatus.SENT
_new_tuple = tuple.__new__


def is_allowed(allowed: Sequence[str] | None, channel: str) -> bool:
    """The authorization rule: an absent or empty ``allowed_outputs`` means every channel."""
    return not allowed or channel in allowed


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Remove every secret (token, password, URL) from text the model, a log or a person sees:
    the channel's own ``secrets`` (which join the one scrubber, so logs and rows drop them too)
    and every value and shape :func:`kernos.runtime.scrub_text` knows."""
    secrets = tuple(secrets)
    register_secrets(*secrets)
    return scrub_text(text, secrets)


def backfill_sender(inbound: InboundMessage | None, channel: Channel) -> str | None:
    """The one recipient safe backfill may use: the sender of a private chat on this channel."""
    if (
        inbound is None
        or not channel.recipient_keys
        or inbound.channel != channel.name
        or inbound.chat_type != "private"
        or not inbound.sender
    ):
        return None
    return inbound.sender


def backfill_meta(meta: str | None, inbound: InboundMessage | None, channel: Channel) -> str | None:
    """Safe backfill: fill the recipient from a private chat's inbound message, conservatively.

    Never overwrites a recipient that is there; leaves invalid JSON (or a non-object) unchanged for
    the handler to report; fills nothing for a group chat, another channel, or a channel that names
    no recipient keys.
    """
    sender = backfill_sender(inbound, channel)
    if sender is None:
        return meta
    key = channel.recipient_keys[0]
    if meta is None or not meta.strip():
        return json.dumps({key: sender}, ensure_ascii=False, separators=(",", ":"))
    try:
        parsed = json.loads(meta)
    except ValueError:
        return meta
    if not isinstance(parsed, dict) or any(
        parsed.get(k) not in (None, "") for k in channel.recipient_keys
    ):
        return meta
    parsed[key] = sender
    return json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))


def _named_recipients(meta: str | None, keys: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every ``(key, recipient)`` the item's meta names; unreadable meta names none (the handler
    reports it)."""
    if meta is None or not meta.strip():
        return []
    try:
        parsed = json.loads(meta)
    except ValueError:
        return []
    if not isinstance(parsed, dict):
        return []
    named: list[tuple[str, str]] = []
    for key in keys:
        value = parsed.get(key)
        if value in (None, "", []):
            continue
        for one in value if isinstance(value, list) else [value]:
            text = one if isinstance(one, str) else json.dumps(one, ensure_ascii=False)
            named.append((key, text.strip()))
    return named


def recipient_refusal(
    meta: str | None, channel: Channel, inbound: InboundMessage | None = None
) -> str | None:
    """The recipient allow-list, for every channel whose meta can choose a recipient: ``None``
    when every recipient the meta names is allowed, else the sentence the item fails with.

    Allowed: the channel's ``recipients`` (``"*"`` among them: anyone), its default recipients and
    the safe backfill's sender. An entry ``KEY=VALUE`` matches that meta key only; recipients
    compare case-insensitively. Meta that names no one passes: the channel's default applies.
    """
    if not channel.recipient_keys:
        return None
    sender = backfill_sender(inbound, channel)
    allowed = (
        *(channel.recipients or ()),
        *channel.default_recipients,
        *([sender] if sender else []),
    )
    allowed = tuple(dict.fromkeys(a for a in allowed if a))
    if "*" in allowed:
        return None
    wanted = {_split_entry(entry, channel.recipient_keys) for entry in allowed}
    for key, recipient in _named_recipients(meta, channel.recipient_keys):
        if (key, recipient.casefold()) in wanted or (None, recipient.casefold()) in wanted:
            continue
        shown_recipient = recipient if len(recipient) <= 200 else recipient[:199] + "…"
        refused = (
            f"recipient refused: {key} {shown_recipient} is not an allowed recipient of "
            f"[{channel.name}]"
        )
        if allowed:
            shown = ", ".join(allowed[:10]) + (", …" if len(allowed) > 10 else "")
            return f"{refused}; send to one of: {shown}"
        return (
            f"{refused}, which may only answer the private chat a message came from and has none "
            "here; do not retry"
        )
    return None


def _split_entry(entry: str, keys: tuple[str, ...]) -> tuple[str | None, str]:
    key, sep, value = entry.partition("=")
    if sep and key.strip() in keys:
        return key.strip(), value.strip().casefold()
    return None, entry.strip().casefold()


class OutputKernel:
    """Channels, the agents' authorizations, the hooks and the per-call limit.

    Args:
        channels: the channels, by name or as a list.
        allowed_outputs: per agent, the channel names it may use (absent or empty: all).
        hooks: ``before_output``/``after_output`` hooks, run in order.
        max_items: the most items one call may carry.
    """

    def __init__(
        self,
        channels: Iterable[Channel] | Mapping[str, Channel] = (),
        *,
        allowed_outputs: Mapping[str, Sequence[str]] | None = None,
        hooks: Iterable[OutputHook] = (),
        max_items: int = DEFAULT_MAX_ITEMS,
    ) -> None:
        values = channels.values() if isinstance(channels, Mapping) else channels
        self.channels: dict[str, Channel] = {}
        for channel in values:
            if channel.name in self.channels:
                raise ValueError(f"two channels are named {channel.name!r}; rename one")
            self.channels[channel.name] = channel
        self.allowed_outputs = dict(allowed_outputs or {})
        self.hooks = tuple(hooks)
        self.max_items = max_items
        self._before = tuple(h for h in self.hooks if h.before_output is not None)
        self._after = tuple(h for h in self.hooks if h.after_output is not None)

    @classmethod
    def from_config(
        cls, config: Config, *, hooks: Iterable[OutputHook] | None = None
    ) -> OutputKernel:
        """The kernel for ``kernos.toml``: its channels (through the ``kernos.channels`` entry
        points), each agent's ``allowed_outputs``, ``[output] max_items`` and the hooks plugins
        register (``kernos.output_hooks``) unless ``hooks`` is given.

        Raises:
            ConfigError: a channel table is wrong (unknown kind or key, bad name or value).
        """
        return cls(
            build_channels(config),
            allowed_outputs={name: a.allowed_outputs for name, a in config.agents.items()},
            hooks=load_hooks() if hooks is None else hooks,
            max_items=config.output.max_items,
        )

    # -- closing ---------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close every channel (its ``aclose`` hook: pooled connections and the like). A hook
        that fails is logged and the others still close; the kernel can send again afterwards."""
        for channel in self.channels.values():
            if channel.aclose is None:
                continue
            try:
                await channel.aclose()
            except Exception as exc:
                logger.warning(
                    "closing channel [%s] failed: %s",
                    channel.name,
                    scrub(f"{type(exc).__name__}: {exc}", channel.secrets),
                )

    async def __aenter__(self) -> OutputKernel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the gate --------------------------------------------------------------------------
    def is_allowed(self, agent: str, channel: str) -> bool:
        return is_allowed(self.allowed_outputs.get(agent), channel)

    def channels_for(self, agent: str) -> list[Channel]:
        """The channels ``agent`` may use, in configuration order."""
        return [c for c in self.channels.values() if self.is_allowed(agent, c.name)]

    def gate(self, agent: str, channel: str) -> Channel:
        """Authorization, then existence — once per call, whatever the number of items.

        Raises:
            OutputArgumentError: ``not_authorized`` or ``unknown_channel``.
        """
        if not self.is_allowed(agent, channel):
            raise OutputArgumentError(
                "not_authorized",
                f"channel [{channel}] is not authorized for this agent; see output_list_channels",
            )
        found = self.channels.get(channel)
        if found is None:
            raise OutputArgumentError(
                "unknown_channel",
                f"channel [{channel}] does not exist or is unavailable; see output_list_channels",
            )
        return found

    # -- sending ---------------------------------------------------------------------------
    async def send(
        self,
        channel: str,
        payload: Any,
        type: Any = None,
        meta: Any = None,
        *,
        agent: str = "main",
        session_id: str | None = None,
        inbound: InboundMessage | None = None,
    ) -> OutputReceipt:
        """One call: gate, parse, then :meth:`send_one` for each item in order. Never raises for
        a bad call: a rejection is a receipt with ``code`` set and nothing sent."""
        try:
            target = self.gate(agent, channel)
            items = parse_output_items(payload, type, meta, max_items=self.max_items)
        except OutputArgumentError as exc:
            return OutputReceipt(channel, exc.message, code=exc.code)
        outcomes = await self.send_items(
            target, items, agent=agent, session_id=session_id, inbound=inbound
        )
        return OutputReceipt.of(channel, outcomes, single=isinstance(payload, str))

    async def send_items(
        self,
        channel: Channel,
        items: Sequence[OutputItem],
        *,
        agent: str = "main",
        session_id: str | None = None,
        inbound: InboundMessage | None = None,
    ) -> list[ItemOutcome]:
        """The batch: a loop over :meth:`send_one`, in order; a failed item never stops it.
        The gate and parsing have already passed."""
        total = len(items)
        outcomes: list[ItemOutcome] = []
        for index, item in enumerate(items, 1):
            ctx = OutputContext(channel.name, agent, index, total, session_id, inbound)
            outcomes.append(await self.send_one(channel, item, ctx))
        return outcomes

    async def send_one(self, channel: Channel, item: OutputItem, ctx: OutputContext) -> ItemOutcome:
        """One item through every stage: before_output → safe backfill → handler → after_output.

        Never raises for a failed item (only cancellation passes through); the outcome says what
        happened. Written flat because it runs once per item: the no-hook path is one handler
        await and one outcome.
        """
        outcome: ItemOutcome | None = None
        if self._before:
            item, outcome = await self._before_output(item, ctx)
        if outcome is None:
            if ctx.inbound is not None:
                item = _with_meta(item, backfill_meta(item.meta, ctx.inbound, channel))
            refusal = recipient_refusal(item.meta, channel, ctx.inbound)
            if refusal is not None:
                outcome = _failed(channel, item, ctx, refusal)
        if outcome is None:
            try:
                result = await channel.send(item, ctx)
            except (ChannelError, WorkspaceRefused) as exc:
                outcome = _failed(channel, item, ctx, str(exc) or "the channel reported a failure")
            except Exception as exc:  # a plugin bug: the item fails, the batch goes on
                outcome = _failed(channel, item, ctx, f"{type(exc).__name__}: {exc}")
            else:
                if result is None or result is _SENT:
                    # the hot path: tuple.__new__ skips the named tuple's Python-level __new__
                    outcome = _new_tuple(ItemOutcome, (ctx.index, item.type, _SENT, ""))
                else:
                    outcome = _not_plainly_sent(channel, item, ctx, result)
        if self._after:
            await self._after_output(channel, item, ctx, outcome)
        return outcome

    async def _before_output(
        self, item: OutputItem, ctx: OutputContext
    ) -> tuple[OutputItem, ItemOutcome | None]:
        for hook in self._before:
            assert hook.before_output is not None
            try:
                changed = await hook.before_output(item, ctx)
            except OutputBlocked as exc:
                return item, ItemOutcome(
                    ctx.index, item.type, SendStatus.FAILED, _blocked(exc.reason)
                )
            except Exception as exc:
                logger.warning("before_output hook %s failed: %s", hook.name, type(exc).__name__)
                reason = f"hook {hook.name} failed ({type(exc).__name__})"
                return item, ItemOutcome(ctx.index, item.type, SendStatus.FAILED, _blocked(reason))
            if changed is not None:
                item = changed
                if not item.payload.strip():
                    return item, ItemOutcome(
                        ctx.index, item.type, SendStatus.FAILED, "cleared by plugin"
                    )
        return item, None

    async def _after_output(
        self, channel: Channel, item: OutputItem, ctx: OutputContext, outcome: ItemOutcome
    ) -> None:
        for hook in self._after:
            assert hook.after_output is not None
            try:
                await hook.after_output(item, ctx, outcome)
            except Exception as exc:
                logger.warning(
                    "after_output hook %s failed on [%s] item %d: %s",
                    hook.name,
                    ctx.channel,
                    ctx.index,
                    scrub(f"{type(exc).__name__}: {exc}", channel.secrets),
                )


def _blocked(reason: str) -> str:
    return f"blocked by plugin: {reason}" if reason.strip() else "blocked by plugin"


def _with_meta(item: OutputItem, meta: str | None) -> OutputItem:
    return item if meta == item.meta else OutputItem(item.payload, item.type, meta)


def _failed(channel: Channel, item: OutputItem, ctx: OutputContext, error: str) -> ItemOutcome:
    error = scrub(error, channel.secrets)
    logger.info("output via [%s] item %d failed: %s", ctx.channel, ctx.index, error)
    return ItemOutcome(ctx.index, item.type, SendStatus.FAILED, error)


def _not_plainly_sent(
    channel: Channel, item: OutputItem, ctx: OutputContext, result: object
) -> ItemOutcome:
    if isinstance(result, Delivery):
        return ItemOutcome(ctx.index, item.type, result.status, scrub(result.note, channel.secrets))
    if result is SendStatus.QUEUED or result is SendStatus.UNCONFIRMED:
        return ItemOutcome(ctx.index, item.type, result)
    return _failed(
        channel, item, ctx, f"the channel returned {result!r}, which is not a send result"
    )
