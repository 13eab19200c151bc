"""Plugins: channel kinds from the ``kernos.channels`` entry points (built-ins included) and stage
hooks from ``kernos.output_hooks``; channels built from ``[channels.NAME]`` tables."""

from __future__ import annotations

import dataclasses
import re
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from kernos.output._channel import Channel, ChannelConfig, ChannelFactory
from kernos.output._kernel import OutputHook
from kernos.runtime import Config, register_secrets

CHANNEL_GROUP = "kernos.channels"
HOOK_GROUP = "kernos.output_hooks"

#: ``output_send__<name>_help`` must stay within a provider's 64-character tool-name limit.
MAX_TOOL_CHANNEL_NAME = 64 - len("output_send__") - len("_help")
_CONFIG_NAME = re.compile(rf"^[A-Za-z0-9_-]{{1,{MAX_TOOL_CHANNEL_NAME}}}$")


def _entry_points(group: str) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=group)}


def channel_kinds() -> list[str]:
    """The channel kinds installed (built-in and third-party), sorted."""
    return sorted(_entry_points(CHANNEL_GROUP))


def build_channel(
    name: str, table: dict[str, Any], *, base_dir: Path | None = None, file: Path | None = None
) -> Channel:
    """One channel from its ``[channels.NAME]`` table.

    Raises:
        ConfigError: a bad name, a missing or unknown ``kind``, or a key the kind does not accept.
    """
    setup = ChannelConfig(name, "", {}, base_dir or Path.cwd(), file)
    if not _CONFIG_NAME.match(name):
        raise setup.error(
            "",
            f"channel name {name!r} is not valid",
            f"use 1-{MAX_TOOL_CHANNEL_NAME} letters, digits, '_' or '-' (it becomes part of the "
            "tool name output_send__NAME_help)",
        )
    if not isinstance(table, dict):
        raise setup.error("", "must be a table", f"write [channels.{name}] with kind = ...")
    options = dict(table)
    kind = options.pop("kind", None)
    description = options.pop("description", None)
    kinds = _entry_points(CHANNEL_GROUP)
    known = ", ".join(sorted(kinds)) or "(none installed)"
    if not isinstance(kind, str) or not kind.strip():
        raise setup.error("kind", "is missing", f"add kind = one of: {known}")
    if kind not in kinds:
        raise setup.error(
            "kind", f"unknown channel kind {kind!r}", f"use one of: {known}, or install its plugin"
        )
    if description is not None and (not isinstance(description, str) or not description.strip()):
        raise setup.error("description", "must be a non-empty string", 'write description = "..."')
    setup = dataclasses.replace(setup, kind=kind, options=options)
    factory: ChannelFactory = kinds[kind].load()
    channel = factory(setup)
    if not isinstance(channel, Channel):
        raise setup.error("kind", f"the {kind!r} plugin did not return a Channel", "fix the plugin")
    register_secrets(*channel.secrets)  # logs, rows and reports drop them too, not only receipts
    return dataclasses.replace(
        channel,
        name=name,
        kind=kind,
        description=description.strip() if description else channel.description,
    )


def build_channels(config: Config) -> dict[str, Channel]:
    """Every configured channel, in configuration order.

    Raises:
        ConfigError: see :func:`build_channel`; the error names the config file.
    """
    file = config.path
    base_dir = file.parent if file is not None else Path.cwd()
    return {
        name: build_channel(name, table, base_dir=base_dir, file=file)
        for name, table in config.channels.items()
    }


def load_hooks() -> list[OutputHook]:
    """The hooks plugins register: each ``kernos.output_hooks`` entry point names an
    :class:`OutputHook` or a factory returning one.

    Raises:
        TypeError: an entry point names something else.
    """
    hooks: list[OutputHook] = []
    for name, ep in sorted(_entry_points(HOOK_GROUP).items()):
        loaded = ep.load()
        hook = loaded if isinstance(loaded, OutputHook) else loaded()
        if not isinstance(hook, OutputHook):
            raise TypeError(f"entry point {HOOK_GROUP}:{name} must give an OutputHook")
        hooks.append(hook)
    return hooks
