"""Every tool the configured sources offer, and each agent's selection from them.

Sources: plugins in the ``kernos.tools`` entry-point group (kernos' own built-in workspace tools
are one, registered the same way) and ``[tools.NAME] function = "module:attr"`` tables.

An entry point names a **factory**: ``factory(context: ToolPluginContext) -> Iterable[ToolSpec]``
(a plain function becomes a tool with ``function_tool(fn)`` inside the factory). A factory gets the
config and the workspace policy, so plugin tools are confined like the built-ins.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import re
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from kernos.boundary import ToolSpec
from kernos.runtime import (
    KERNOS_TOOLS,
    Config,
    ConfigError,
    WorkspacePolicy,
    from_source,
    kernos_tool_home,
    parse_entry,
    unmatched_entries,
)
from kernos.tools._builtin_specs import builtin_tools
from kernos.tools._functions import function_tool
from kernos.tools._paths import LocalWorkspace, WorkspacePaths
from kernos.tools._select import (
    claude_code_hint,
    matches,
    mcp_later,
    select_tools,
    unmatched,
)
from kernos.tools._write import write_tools

TOOLS_GROUP = "kernos.tools"

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

#: kernos' other tools an agent's ``tools`` may name (the task tool grants them to children):
#: the runtime's one list of kernos tool names, less ``compress`` (served by ``kernos mcp`` only)
OTHER_KERNOS_TOOLS = tuple(name for name in KERNOS_TOOLS if name != "compress")


@dataclass(frozen=True)
class ToolPluginContext:
    """What a ``kernos.tools`` factory receives."""

    config: Config
    workspace: WorkspacePaths


@dataclass(frozen=True)
class ToolEntry:
    """One available tool and where it comes from: ``builtin``, ``function`` or ``plugin:NAME``."""

    spec: ToolSpec[Any]
    source: str

    @property
    def summary(self) -> str:
        """The description's first sentence, on one line."""
        text = " ".join(self.spec.description.split())
        first = text.split(". ", 1)[0].rstrip(".")
        return first if len(first) <= 100 else first[:97] + "..."


def default_workspace(config: Config, cwd: Path | None = None) -> LocalWorkspace:
    """The runtime's workspace policy for the built-in tools: ``[workspace] roots`` (default: the
    config's directory, else ``cwd``), ``allow_hidden``, minus kernos' state and config file.

    Raises:
        ConfigError: a ``[workspace]`` root is not an existing directory.
    """
    if config.path is None and cwd is not None:
        return LocalWorkspace.from_policy(WorkspacePolicy.default(cwd))
    return LocalWorkspace.from_policy(WorkspacePolicy.from_config(config))


def _source_of(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if (dist is not None and dist.name == "kernos") or ep.value.startswith("kernos."):
        return "builtin"
    return f"plugin:{ep.name}"


def _plugin_specs(ep: EntryPoint, context: ToolPluginContext) -> list[ToolSpec[Any]]:
    key = f"entry point {TOOLS_GROUP}:{ep.name} ({ep.value})"
    try:
        factory = ep.load()
        made = factory(context)
    except Exception as exc:
        raise ConfigError(
            None,
            key,
            f"failed to load ({type(exc).__name__}: {exc})",
            "fix or uninstall the plugin",
        ) from None
    specs = [made] if isinstance(made, ToolSpec) else list(made or [])
    bad = [s for s in specs if not isinstance(s, ToolSpec)]
    if bad:
        raise ConfigError(
            None,
            key,
            f"returned {type(bad[0]).__name__}, not a ToolSpec",
            "return kernos.boundary.ToolSpec objects (kernos.tools.function_tool(fn) makes one)",
        )
    return specs


def _search_path(config: Config, cwd: Path) -> None:
    """Make ``[tools.NAME] function`` modules importable from the config's directory and the
    working directory, as ``python -m`` does for the working directory."""
    for place in (cwd, config.path.parent if config.path is not None else None):
        if place is not None and str(place.resolve()) not in sys.path:
            sys.path.insert(0, str(place.resolve()))


def load_function(reference: str, *, key: str, file: Path | None) -> Any:
    """Import ``package.module:attr`` (``attr`` may be dotted).

    Raises:
        ConfigError: a malformed reference, a module that cannot be imported, a missing attribute.
    """
    module_name, sep, attr = reference.strip().partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            file,
            key,
            f"{reference!r} is not a function reference",
            'write function = "package.module:function"',
        )
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(
            file,
            key,
            f"cannot import module {module_name!r} ({type(exc).__name__}: {exc})",
            "check the module name; it must be importable from the config's directory, the "
            "working directory or the environment",
        ) from None
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(
                file,
                key,
                f"module {module_name!r} has no attribute {attr!r}",
                "check the name after the ':'",
            ) from None
    return target


def _function_specs(config: Config, cwd: Path, problems: list[ConfigError]) -> list[ToolSpec[Any]]:
    """The ``[tools.NAME]`` functions' tools; each one that fails is appended to ``problems``."""
    if not config.tools:
        return []
    _search_path(config, cwd)
    specs: list[ToolSpec[Any]] = []
    for name, table in config.tools.items():
        try:
            specs.append(_function_spec(config, name, table.function, table.description))
        except ConfigError as exc:
            problems.append(exc)
    return specs


def _function_spec(
    config: Config, name: str, function: str, description: str | None
) -> ToolSpec[Any]:
    key = f"tools.{name}.function"
    if not _TOOL_NAME.match(name):
        raise ConfigError(
            config.path,
            f"tools.{name}",
            f"{name!r} is not a valid tool name",
            "use 1-64 letters, digits, '_' or '-'",
        )
    target = load_function(function, key=key, file=config.path)
    try:
        if isinstance(target, ToolSpec):
            return dataclasses.replace(
                target, name=name, description=description or target.description
            )
        return function_tool(target, name=name, description=description, max_retries=config.retries)
    except TypeError as exc:
        raise ConfigError(config.path, key, str(exc), "point it at a plain function") from None


class ToolCatalog:
    """Every tool offered by the plugins and ``[tools.NAME]`` functions, by name."""

    def __init__(self, config: Config, entries: Sequence[ToolEntry]) -> None:
        self.config = config
        self.entries: dict[str, ToolEntry] = {}
        #: what could not be offered (a clash of names): skipped, for :meth:`problems`
        self.rejected: list[ConfigError] = []
        for entry in entries:
            try:
                _check_not_kernos_name(config, entry)
            except ConfigError as exc:
                self.rejected.append(exc)
                continue
            taken = self.entries.get(entry.spec.name)
            if taken is not None:
                self.rejected.append(
                    ConfigError(
                        config.path,
                        f"tools.{entry.spec.name}",
                        f"tool {entry.spec.name!r} is offered by {taken.source} and by "
                        f"{entry.source}",
                        "rename one of them",
                    )
                )
                continue
            self.entries[entry.spec.name] = entry

    @property
    def defaults(self) -> list[str]:
        """What an agent without a ``tools`` key gets: the built-in tools."""
        return [name for name, e in self.entries.items() if e.source == "builtin"]

    def for_agent(self, agent: str) -> list[ToolEntry]:
        """The tools ``agent`` selects, in its order."""
        patterns = self.config.agent(agent).tools
        specs = select_tools(
            patterns, (e.spec for e in self.entries.values()), defaults=self.defaults
        )
        return [self.entries[s.name] for s in specs]

    def check(self) -> None:
        """Every agent's ``tools`` names something that exists.

        Raises:
            ConfigError: the first of :meth:`problems`, the others in its ``others``.
        """
        problems = self.problems()
        if problems:
            problems[0].others = problems[1:]
            raise problems[0]

    def problems(self, broken: Collection[str] = ()) -> list[ConfigError]:
        """The tools that could not be offered, then each agent whose ``tools`` names something
        that does not exist (naming the agent, the unknown names and what exists). ``broken``:
        tools whose source failed (already a problem), not reported again as unknown."""
        servers = getattr(self.config, "mcp", None)
        later_mcp = mcp_later(list(servers) if isinstance(servers, dict) else None)

        def later(pattern: str) -> bool:
            return (
                later_mcp(pattern)
                or any(matches(p, pattern) or matches(pattern, p) for p in OTHER_KERNOS_TOOLS)
                or any(matches(pattern, b) for b in broken)
            )

        problems = list(self.rejected)
        problems += self._permission_problems(later)
        for name, agent in self.config.agents.items():
            if agent.tools is None:
                continue
            unknown = unmatched(agent.tools, self.entries, later=later)
            if not unknown:
                continue
            known = ", ".join(self.entries) or "(none)"
            shown = ", ".join(repr(u) for u in unknown)
            hint = claude_code_hint(unknown)
            no_server = sorted({u.partition("__")[0] for u in unknown if "__" in u.strip("_")})
            if no_server:
                configured = ", ".join(servers or {}) or "none"
                hint = (
                    "; ".join(
                        [
                            *([hint] if hint else []),
                            *(f"no [mcp.{s}] server is configured" for s in no_server),
                        ]
                    )
                    + f" (MCP servers: {configured})"
                )
            problems.append(
                ConfigError(
                    agent.source or self.config.path,
                    f"agents.{name}.tools",
                    f"{shown} {'matches' if len(unknown) == 1 else 'match'} no tool"
                    + (f"; {hint}" if hint else ""),
                    f"use names from the available tools: {known}"
                    + ("" if hint else "; add a [tools.NAME] function or an [mcp.NAME] server"),
                )
            )
        return problems

    def _permission_problems(self, later: Callable[[str], bool]) -> list[ConfigError]:
        """Each ``[permissions]`` / ``[agents.NAME.permissions]`` list with an entry whose
        tool-name glob matches no tool (a misspelt rule would silently rule nothing)."""
        tables: list[tuple[Any, Any]] = [
            (self.config.permissions.table("permissions"), self.config.path)
        ]
        tables += [
            (
                agent.permissions.table(f"agents.{name}.permissions"),
                agent.source or self.config.path,
            )
            for name, agent in self.config.agents.items()
            if agent.permissions is not None
        ]
        known = ", ".join(self.entries) or "(none)"
        problems = []
        for table, file in tables:
            by_list: dict[str, list[str]] = {}
            for where, entry in unmatched_entries([table], list(self.entries)):
                if not later(parse_entry(entry).tool):
                    by_list.setdefault(where, []).append(entry)
            for where, unknown in by_list.items():
                shown = ", ".join(repr(u) for u in unknown)
                problems.append(
                    ConfigError(
                        file,
                        where,
                        f"{shown} {'matches' if len(unknown) == 1 else 'match'} no tool",
                        f"use names from the available tools: {known}; or the task, output "
                        "and [mcp.NAME] server tools",
                    )
                )
        return problems


def _check_not_kernos_name(config: Config, entry: ToolEntry) -> None:
    """A function or plugin tool named like one of kernos's own tools is a config error.

    Raises:
        ConfigError: naming the tool, where it comes from and the kernos tool it collides with.
    """
    if entry.source == "builtin":
        return
    name = entry.spec.name
    owner = kernos_tool_home(name)
    if owner is None:
        return
    own = f"kernos's own tool {name!r} ({owner})"
    if entry.source == "function":
        raise ConfigError(
            config.path,
            f"tools.{name}",
            f"the function tool {name!r} collides with {own}",
            f"rename the table, e.g. [tools.my_{name}]",
        )
    raise ConfigError(
        None,
        f"entry point {TOOLS_GROUP}:{entry.source.removeprefix('plugin:')}",
        f"the plugin tool {name!r} collides with {own}",
        "rename the plugin's tool, or uninstall the plugin",
    )


def workspace_tools(context: ToolPluginContext) -> list[ToolSpec[Any]]:
    """The built-in tools' ``kernos.tools`` entry point: read_file, list_files, search_files,
    and the write tools write_file and edit_file (their own rule: ``ask``)."""
    return builtin_tools(context.workspace) + write_tools(context.workspace)


def _marked(spec: ToolSpec[Any], source: str) -> ToolSpec[Any]:
    """A function's or plugin's tool: its results reach the model delimited as data from
    ``function:NAME`` / ``plugin:NAME`` (:func:`kernos.runtime.from_source`); kernos's own
    built-in tools are not marked."""
    if source == "builtin":
        return spec
    origin = f"function:{spec.name}" if source == "function" else source
    return from_source(spec, origin)


def load_catalog(
    config: Config,
    *,
    workspace: WorkspacePaths | None = None,
    cwd: Path | None = None,
    plugins: Iterable[EntryPoint] | None = None,
) -> ToolCatalog:
    """Load every tool source for ``config`` and check every agent's ``tools``.

    Args:
        config: the loaded configuration.
        workspace: the policy that confines the tools (default: :func:`default_workspace`).
        cwd: the working directory (default: the process's).
        plugins: the entry points to load (default: the installed ``kernos.tools`` group).

    Raises:
        ConfigError: a plugin that fails to load, a bad ``[tools.NAME]``, a name offered twice,
            an agent naming a tool that does not exist.
    """
    catalog, problems = check_catalog(config, workspace=workspace, cwd=cwd, plugins=plugins)
    if problems:
        problems[0].others = problems[1:]
        raise problems[0]
    return catalog


def check_catalog(
    config: Config,
    *,
    workspace: WorkspacePaths | None = None,
    cwd: Path | None = None,
    plugins: Iterable[EntryPoint] | None = None,
) -> tuple[ToolCatalog, list[ConfigError]]:
    """:func:`load_catalog` without raising: the catalog of every tool that loaded, and every
    problem (each plugin, each ``[tools.NAME]``, each agent's ``tools``) found in one pass.

    Raises:
        ConfigError: a ``[workspace]`` root is not an existing directory (no tool can load).
    """
    cwd = cwd or Path.cwd()
    context = ToolPluginContext(config, workspace or default_workspace(config, cwd))
    problems: list[ConfigError] = []
    entries: list[ToolEntry] = []
    eps = list(plugins) if plugins is not None else list(entry_points(group=TOOLS_GROUP))
    for ep in sorted(eps, key=lambda e: (_source_of(e) != "builtin", e.name)):
        source = _source_of(ep)
        try:
            specs = _plugin_specs(ep, context)
        except ConfigError as exc:
            problems.append(exc)
            continue
        entries += [ToolEntry(_marked(spec, source), source) for spec in specs]
    before = len(problems)
    functions = _function_specs(config, cwd, problems)
    made = {spec.name for spec in functions}
    broken = [name for name in config.tools if name not in made] if len(problems) > before else []
    entries += [ToolEntry(_marked(spec, "function"), "function") for spec in functions]
    catalog = ToolCatalog(config, entries)
    problems += catalog.problems(broken)
    return catalog, problems


def agent_tools(
    config: Config, agent: str, *, present: Callable[[str], bool] = lambda _: False
) -> list[ToolSpec[Any]]:
    """The tools ``agent`` gets from every source, leaving out names already ``present``."""
    return [e.spec for e in load_catalog(config).for_agent(agent) if not present(e.spec.name)]


class CatalogToolset:
    """Built-in workspace tools, ``[tools.NAME]`` functions and plugins as a toolset: the ones
    the session's agent selects (``tools``), leaving out names the session already has."""

    name = "tools"

    def __init__(self, config: Config) -> None:
        self.config = config

    async def tools(self, session: Any) -> list[ToolSpec[Any]]:
        present = getattr(session, "tools", {})
        return agent_tools(
            self.config, getattr(session, "agent", "main"), present=present.__contains__
        )

    def outstanding(self) -> bool:
        return False

    async def wait_change(self) -> None:
        await asyncio.Event().wait()

    async def __aenter__(self) -> CatalogToolset:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None
