"""What a channel is, what its handler returns, and what a plugin's factory receives.

Errors come in three families (the tree in :mod:`kernos.errors`):

* **Bad calls** — :class:`~kernos.output.OutputArgumentError`: the model's arguments or the gate
  rejected the call; nothing was sent; the model reads the message and retries.
* **Configuration mistakes** — :class:`~kernos.runtime.ConfigError`, raised when channels are built
  from ``kernos.toml`` (an unknown kind, an unknown key, a bad name): exit 2 with the fix.
* **Delivery failures** — :class:`ChannelError` raised by a handler for one item; the item fails,
  the rest of the batch still goes, and the text reaches the model verbatim (credentials removed).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from kernos.errors import ChannelError as ChannelError
from kernos.output._parse import OutputItem
from kernos.runtime import ConfigError, WorkspacePolicy

#: The send tool of channel NAME is ``output_send__NAME``; its help tool ``output_send__NAME_help``.
SEND_PREFIX = "output_send__"

#: The longest channel name whose tools fit a provider's 64-character tool-name limit: 46.
MAX_CHANNEL_NAME = 64 - len(SEND_PREFIX) - len("_help")

#: What a channel name must look like — the one rule, used by :class:`Channel` and the registry.
CHANNEL_NAME = re.compile(rf"^[A-Za-z0-9_-]{{1,{MAX_CHANNEL_NAME}}}$")


#: What to do about a bad channel name.
CHANNEL_NAME_FIX = (
    f"use 1-{MAX_CHANNEL_NAME} letters, digits, '_' or '-' (it becomes part of the tool name "
    f"{SEND_PREFIX}NAME_help, which must fit in 64 characters)"
)


def channel_name_problem(name: object) -> str | None:
    """``None`` for a valid channel name, else what is wrong (:data:`CHANNEL_NAME_FIX` says what
    to do)."""
    if isinstance(name, str) and CHANNEL_NAME.match(name):
        return None
    return f"channel name {name!r} is not valid"


class SendStatus(StrEnum):
    """How one item ended. ``queued`` and ``unconfirmed`` are not confirmed deliveries."""

    SENT = "sent"
    QUEUED = "queued"
    UNCONFIRMED = "unconfirmed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Delivery:
    """A handler's answer when "sent" is not the whole truth: queued or unconfirmed, with a note."""

    status: Literal[SendStatus.QUEUED, SendStatus.UNCONFIRMED]
    note: str = ""

    @classmethod
    def queued(cls, note: str = "") -> Delivery:
        return cls(SendStatus.QUEUED, note)

    @classmethod
    def unconfirmed(cls, note: str = "") -> Delivery:
        return cls(SendStatus.UNCONFIRMED, note)


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """The message a session is answering, when it came from a channel.

    Safe backfill uses it to fill in a missing recipient — only for ``private`` chats, because in a
    group the sender is not the recipient.
    """

    channel: str
    sender: str
    chat_type: Literal["private", "group"] = "private"
    chat_id: str | None = None


@dataclass(slots=True)
class OutputContext:
    """What a hook or handler may know about the item besides the item itself."""

    channel: str
    agent: str = "main"
    index: int = 1
    total: int = 1
    session_id: str | None = None
    inbound: InboundMessage | None = None


Handler = Callable[[OutputItem, OutputContext], Awaitable["Delivery | SendStatus | None"]]


@dataclass(frozen=True)
class Channel:
    """A named destination and its async handler ``send(item, ctx)``.

    Args:
        name: ``^[A-Za-z0-9_-]{1,46}$``; it becomes part of the tool names
            ``output_send__<name>`` and ``output_send__<name>_help``.
        send: the handler: returns ``None`` (sent), a :class:`Delivery` (queued/unconfirmed), or
            raises :class:`ChannelError` (failed). It decides which types it sends.
        description: what the channel is for (shown to the model).
        types: the types the handler sends, for the help text only — the kernel never checks them.
        meta_help: what ``meta`` looks like, for the help text.
        kind: the plugin kind that built it (``file``, ``webhook``, …).
        recipient_keys: the meta keys that name a recipient; safe backfill fills the first one.
            The kernel admits a recipient named there only if it is on the allow-list.
        recipients: recipients the model may name besides the defaults (``recipients = [...]``
            in the channel's table; an entry ``KEY=VALUE`` matches that key only); ``"*"``
            admits anyone. Always allowed: ``default_recipients`` and the safe backfill's sender.
        default_recipients: who the channel sends to when meta names no one (email ``to``).
        secrets: strings never to show in a receipt, error or log (tokens, passwords, URLs).
        aclose: the close hook, ``async () -> None``: releases what the handler holds open (a
            pooled HTTP client); ``OutputKernel.aclose`` calls it. The channel may be used
            again afterwards (it reopens on demand).

    Raises:
        ValueError: the name is not valid.
    """

    name: str
    send: Handler
    description: str = ""
    types: tuple[str, ...] = ()
    meta_help: str = ""
    kind: str = ""
    recipient_keys: tuple[str, ...] = ()
    recipients: tuple[str, ...] | None = None
    default_recipients: tuple[str, ...] = ()
    secrets: tuple[str, ...] = field(default=(), repr=False)
    aclose: Callable[[], Awaitable[None]] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        problem = channel_name_problem(self.name)
        if problem is not None:
            raise ValueError(f"{problem}: {CHANNEL_NAME_FIX}")

    def summary(self) -> str:
        """The description, then the types and the meta format when known."""
        lines = [self.description.strip() or f"Channel {self.name}."]
        if self.types:
            lines.append(f"Types: {', '.join(self.types)}.")
        if self.meta_help:
            lines.append(f"meta: {self.meta_help.strip()}")
        return "\n".join(lines)


@dataclass(frozen=True)
class ChannelConfig:
    """What a plugin's factory receives: one ``[channels.NAME]`` table, ``kind`` and
    ``description`` already taken out, with helpers that raise :class:`ConfigError` naming the
    channel and the key.

    A factory is ``def my_kind_channel(config: ChannelConfig) -> Channel`` registered in the
    entry-point group ``kernos.channels`` under the kind's name. A payload that names a file goes
    through ``workspace`` (``config.workspace.read_attachment(item.payload)``), never straight to
    the file system; a refusal raised there fails the item with the policy's sentence.
    """

    name: str
    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)
    base_dir: Path = field(default_factory=Path.cwd)
    file: Path | None = None
    workspace: WorkspacePolicy = field(default_factory=WorkspacePolicy.default)

    def error(self, key: str, problem: str, fix: str) -> ConfigError:
        where = f"channels.{self.name}.{key}" if key else f"channels.{self.name}"
        return ConfigError(self.file, where, problem, fix)

    def check_keys(self, accepted: tuple[str, ...], required: tuple[str, ...] = ()) -> None:
        """Reject unknown keys (naming the accepted ones) and missing required keys."""
        for key in self.options:
            if key not in accepted:
                allowed = ", ".join(("kind", "description", *accepted))
                raise self.error(
                    key,
                    f"unknown key {key!r} for channel {self.name!r} (kind {self.kind})",
                    f"accepted keys: {allowed}",
                )
        for key in required:
            if key not in self.options:
                raise self.error(key, f"channel {self.name!r} needs {key!r}", f"add {key} = ...")

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self.options.get(key, default)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise self.error(key, "must be a non-empty string", f'write {key} = "..."')
        return value

    def number(self, key: str, default: float) -> float:
        value = self.options.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise self.error(key, "must be a positive number", f"write {key} = {default}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.options.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, "must be true or false", f"write {key} = {str(default).lower()}")
        return value

    def texts(self, key: str) -> list[str]:
        """A string or a list of strings (absent: empty)."""
        value = self.options.get(key, [])
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
            raise self.error(key, "must be a string or a list of strings", f'write {key} = ["..."]')
        return list(values)

    def table(self, key: str) -> dict[str, str]:
        value = self.options.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self.error(key, "must be a table of strings", f'write {key} = {{ Name = "..." }}')
        return {str(k): v for k, v in value.items()}

    def path(self, key: str) -> Path | None:
        """A path option; relative paths are read against the config file's directory."""
        raw = self.text(key)
        if raw is None:
            return None
        path = Path(raw).expanduser()
        return path if path.is_absolute() else self.base_dir / path


ChannelFactory = Callable[[ChannelConfig], Channel]
