"""Plugins: channel kinds from the ``kernos.channels`` entry points (built-ins included) and stage
hooks from ``kernos.output_hooks``; channels built from ``[channels.NAME]`` tables."""

from __future__ import annotations

import dataclasses
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernos.output._channel import (
    CHANNEL_NAME_FIX,
    Channel,
    ChannelConfig,
    ChannelFactory,
    channel_name_problem,
)
from kernos.runtime import WorkspacePolicy, register_secrets

if TYPE_CHECKING:
    from kernos.output._hooks import OutputHook
    from kernos.runtime import Config

CHANNEL_GROUP = "kernos.channels"
HOOK_GROUP = "kernos.output_hooks"


def _entry_points(group: str) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=group)}


def channel_kinds() -> list[str]:
    """The channel kinds installed (built-in and third-party), sorted."""
    return sorted(_entry_points(CHANNEL_GROUP))


def build_channel(
    name: str,
    table: dict[str, Any],
    *,
    base_dir: Path | None = None,
    file: Path | None = None,
    workspace: WorkspacePolicy | None = None,
) -> Channel:
    """One channel from its ``[channels.NAME]`` table.

    ``recipients`` is taken out here for every kind whose channel names ``recipient_keys``.

    Args:
        workspace: the policy model-supplied paths go through (default: the working directory's).

    Raises:
        ConfigError: a bad name, a missing or unknown ``kind``, a key the kind does not accept,
            or ``recipients`` on a kind that names no recipient.
    """
    return _build_channel(
        name, table, _entry_points(CHANNEL_GROUP), base_dir=base_dir, file=file, workspace=workspace
    )


def _build_channel(
    name: str,
    table: dict[str, Any],
    kinds: dict[str, EntryPoint],
    *,
    base_dir: Path | None = None,
    file: Path | None = None,
    workspace: WorkspacePolicy | None = None,
) -> Channel:
    """:func:`build_channel` with the installed ``kinds`` read once for all the channels (a scan
    of every installed distribution: ~10 ms each time)."""
    where = base_dir or Path.cwd()
    setup = ChannelConfig(name, "", {}, where, file, workspace or WorkspacePolicy.default(where))
    problem = channel_name_problem(name)
    if problem is not None:
        raise setup.error("", problem, CHANNEL_NAME_FIX)
    if not isinstance(table, dict):
        raise setup.error("", "must be a table", f"write [channels.{name}] with kind = ...")
    options = dict(table)
    kind = options.pop("kind", None)
    description = options.pop("description", None)
    recipients = _recipients(setup, options.pop("recipients", None))
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
    if recipients is not None and not channel.recipient_keys:
        raise setup.error(
            "recipients",
            f"channel kind {kind!r} does not let the model choose a recipient",
            "remove recipients",
        )
    return dataclasses.replace(
        channel,
        name=name,
        kind=kind,
        description=description.strip() if description else channel.description,
        recipients=channel.recipients if recipients is None else recipients,
    )


def _recipients(setup: ChannelConfig, value: Any) -> tuple[str, ...] | None:
    """``recipients = ["ana@example.org", 123456, "group_id=42"]`` or ``["*"]``; absent: None."""
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    ok = all(
        (isinstance(v, str) and v.strip()) or (isinstance(v, int) and not isinstance(v, bool))
        for v in values
    )
    if not ok:
        raise setup.error(
            "recipients",
            "must be a list of addresses or ids",
            'write recipients = ["ana@example.org"], or ["*"] for anyone',
        )
    return tuple(str(v).strip() for v in values)


def build_channels(config: Config) -> dict[str, Channel]:
    """Every configured channel, in configuration order.

    Raises:
        ConfigError: see :func:`build_channel`, or a bad ``[workspace]`` table; the error names
            the config file.
    """
    workspace = WorkspacePolicy.from_config(config)
    kinds = _entry_points(CHANNEL_GROUP) if config.channels else {}
    return {
        name: _build_channel(
            name, table, kinds, base_dir=config.base_dir, file=config.path, workspace=workspace
        )
        for name, table in config.channels.items()
    }


def read_channels(path: Path | str | None = None, *, cwd: Path | None = None) -> dict[str, Channel]:
    """The channels ``kernos.toml`` configures, as :func:`build_channels` builds them from
    :func:`~kernos.runtime.load_config`, for listing them (``kernos channels``).

    When the file has no ``[workspace]`` table and ``[channels]`` is a table of tables (the usual
    case), only ``[channels]`` is read, without the config models: its ``${ENV}`` references are
    expanded and each table is built by its kind, as the whole config would; a mistake elsewhere
    in the file does not stop the listing (``kernos config check`` reports it). Otherwise the
    whole config is loaded.

    Raises:
        ConfigError: unreadable TOML, an unset ``${ENV}`` in a channel table, or see
            :func:`build_channels`.
    """
    from kernos.runtime import config_file, expand_env, kernos_home, register_config_urls

    where = cwd or Path.cwd()
    file, data = config_file(path, cwd=where)
    tables = data.get("channels", {})
    if (
        "workspace" in data
        or not isinstance(tables, dict)
        or not all(isinstance(t, dict) for t in tables.values())
    ):
        from kernos.runtime import load_config

        return build_channels(load_config(path, cwd=where))
    tables = expand_env(tables, file, "channels")
    register_config_urls({"channels": tables})
    found = file if file.exists() else None
    base_dir = file.parent.absolute()
    workspace = WorkspacePolicy.of_project(base_dir, kernos_home(where), found)
    kinds = _entry_points(CHANNEL_GROUP) if tables else {}
    return {
        name: _build_channel(name, table, kinds, base_dir=base_dir, file=found, workspace=workspace)
        for name, table in tables.items()
    }


def load_hooks() -> list[OutputHook]:
    """The hooks plugins register: each ``kernos.output_hooks`` entry point names an
    :class:`OutputHook` or a factory returning one.

    Raises:
        TypeError: an entry point names something else.
    """
    from kernos.output._hooks import OutputHook  # and the receipt types: channels need neither

    hooks: list[OutputHook] = []
    for name, ep in sorted(_entry_points(HOOK_GROUP).items()):
        loaded = ep.load()
        hook = loaded if isinstance(loaded, OutputHook) else loaded()
        if not isinstance(hook, OutputHook):
            raise TypeError(f"entry point {HOOK_GROUP}:{name} must give an OutputHook")
        hooks.append(hook)
    return hooks
