"""``kernos config check``: load everything a run would load, and list every problem with its fix.

The config file and agent files, each model alias and model string (built, not called), the
workspace policy, every channel, every tool source and each agent's ``tools``, each agent's
``allowed_outputs``, and every ``[mcp.NAME]`` server (started, its tools listed, stopped). Each
problem is a :class:`kernos.runtime.ConfigError` (file, key, problem, fix); the check goes on
after one, so a single pass shows them all: a bad value is dropped and what remains is checked
further (:func:`kernos.runtime.load_config_problems`, :func:`kernos.tools.check_catalog`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kernos.runtime import Config, ConfigError, ModelWindow, load_config_problems


@dataclass
class CheckReport:
    """What :func:`check_config` found: ``problems`` (empty: all good) and what it checked."""

    problems: list[ConfigError] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)
    config_path: Path | None = None
    #: keys whose value named an unset ``${ENV}`` (see ``Config.unset_keys``), once reported
    unset: frozenset[str] = frozenset()
    #: each agent's catalog tools and their permission rule (``allow``, ``ask``, ``deny``)
    rules: dict[str, dict[str, str]] = field(default_factory=dict)
    #: each model the config names (and builds) → its context window and where it came from
    windows: dict[str, ModelWindow] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, problem: ConfigError) -> None:
        """Add ``problem`` and its ``others``, once each; a problem of a key in ``unset`` (its
        value named an unset ``${ENV}``, already reported) is left out."""
        for each in (problem, *problem.others):
            if each.key in self.unset:
                continue
            if all(str(each) != str(seen) for seen in self.problems):
                self.problems.append(each)


def _model_references(config: Config, report: CheckReport) -> dict[str, tuple[str | None, str]]:
    """Every model name the config uses → where it is first named (file, key); an agent's
    Claude Code model name (``sonnet``) is reported instead of resolved."""
    from kernos.runtime import agent_model_problem

    file = str(config.path) if config.path else None
    refs: dict[str, tuple[str | None, str]] = {}
    if config.default_model and config.default_model.strip():
        refs.setdefault(config.default_model.strip(), (file, "default_model"))
    for name in config.models:
        refs.setdefault(name, (file, f"models.{name}"))
    for name, agent in config.agents.items():
        problem = agent_model_problem(config, name)
        if problem is not None:
            report.add(problem)
        elif agent.model and agent.model.strip():
            refs.setdefault(agent.model.strip(), (agent.source or file, f"agents.{name}.model"))
    for name, category in config.categories.items():
        if category.model and category.model.strip():
            refs.setdefault(category.model.strip(), (file, f"categories.{name}.model"))
    return refs


def _check_models(config: Config, report: CheckReport) -> None:
    from kernos.runtime import resolve_model

    refs = _model_references(config, report)
    for name, (file, key) in refs.items():
        try:
            resolve_model(name, config)
        except ConfigError as exc:
            if not exc.key.startswith("models."):  # say where the model is named
                exc = ConfigError(file or exc.file, key, exc.problem, exc.fix)
            report.add(exc)
        else:
            report.windows[name] = config.model_window(name)
    report.checked["models"] = len(refs)


def window_lines(windows: dict[str, ModelWindow]) -> list[str]:
    """One line per model: its context window and where it came from."""
    return [f"model {name}: {window.describe()}" for name, window in windows.items()]


def _check_channels(config: Config, report: CheckReport) -> None:
    from kernos.output import build_channel
    from kernos.runtime import WorkspacePolicy

    try:
        workspace = WorkspacePolicy.from_config(config)
    except ConfigError as exc:
        report.add(exc)
        return
    for name, table in config.channels.items():
        try:
            build_channel(
                name, table, base_dir=config.base_dir, file=config.path, workspace=workspace
            )
        except ConfigError as exc:
            report.add(exc)
    report.checked["channels"] = len(config.channels)
    known = ", ".join(config.channels) or "(none configured)"
    for agent_name, agent in config.agents.items():
        for channel in agent.allowed_outputs:
            if channel not in config.channels:
                report.add(
                    ConfigError(
                        agent.source or config.path,
                        f"agents.{agent_name}.allowed_outputs",
                        f"channel {channel!r} is not configured",
                        f"define [channels.{channel}] or remove it; configured channels: {known}",
                    )
                )


def _check_tools(config: Config, report: CheckReport) -> None:
    from kernos.tools import check_catalog

    try:
        catalog, problems = check_catalog(config)
    except ConfigError as exc:
        report.add(exc)
        return
    for problem in problems:
        report.add(problem)
    report.checked["tools"] = len(catalog.entries)
    report.rules = tool_rules(config, catalog)


def tool_rules(config: Config, catalog: Any) -> dict[str, dict[str, str]]:
    """Each agent's catalog tools (``main`` and every configured agent) and their rule: what
    ``kernos config check`` shows. A tool the rules deny is listed ``deny`` (never offered)."""
    from kernos.runtime import Permissions

    permissions = Permissions(config)
    rules: dict[str, dict[str, str]] = {}
    for agent in dict.fromkeys(["main", *config.agents]):
        rules[agent] = {
            e.spec.name: permissions.decision(agent, e.spec).rule for e in catalog.for_agent(agent)
        }
        for name, _ in session_tools():  # the task and team tools, ruled like any other
            rules[agent][name] = permissions.rule_of(agent, name)
    return rules


def session_tools() -> list[tuple[str, str]]:
    """The tools a session gets besides its catalog's and MCP servers' (the task tools; a team
    lead's and members' team tools), each with its source."""
    from kernos.tasks import LEAD_TOOLS, TASK_TOOL_NAMES

    return [(name, "tasks") for name in sorted(TASK_TOOL_NAMES)] + [
        (name, "teams") for name in LEAD_TOOLS
    ]


def rule_lines(rules: dict[str, dict[str, str]]) -> list[str]:
    """One line per agent: its tools grouped by rule (``main: allow read_file, ...; ask ...``)."""
    lines = []
    for agent, tools in rules.items():
        groups = [
            f"{rule} {', '.join(n for n, r in tools.items() if r == rule)}"
            for rule in ("allow", "ask", "deny")
            if rule in tools.values()
        ]
        lines.append(f"rules for {agent}: " + ("; ".join(groups) if groups else "no tools"))
    return lines


async def _check_mcp(config: Config, report: CheckReport) -> None:
    from kernos.tools import McpAgentToolset

    if not config.mcp:
        return
    servers = McpAgentToolset(config)
    started = 0
    offered = 0
    try:
        for toolset in servers.toolsets:  # one by one, so each server that fails is named
            try:
                offered += len(await toolset.tools())
                started += 1
            except ConfigError as exc:
                report.add(exc)
        if started == len(servers.toolsets):
            from kernos.runtime import Permissions

            permissions = Permissions(config)
            for name in config.agents:
                try:
                    specs = await servers.tools(SimpleNamespace(agent=name, tools={}))
                except ConfigError as exc:
                    report.add(exc)
                    continue
                ruled = report.rules.setdefault(name, {})  # its MCP tools' rules too
                for spec in specs:
                    ruled[spec.name] = permissions.decision(name, spec).rule
    finally:
        await servers.aclose()
    report.checked["mcp servers"] = len(config.mcp)
    report.checked["mcp tools"] = offered


async def check_config(path: Path | str | None = None, *, cwd: Path | None = None) -> CheckReport:
    """Load and check everything ``kernos run`` would use; never raises for a config problem.

    Args:
        path: the config file (``--config``; default: the project root's ``kernos.toml``).
        cwd: the working directory (default: the process's).
    """
    report = CheckReport()
    config, problems = load_config_problems(path, cwd=cwd)
    for problem in problems:
        report.add(problem)
    report.config_path = config.path
    report.checked["agents"] = len(config.agents)
    report.checked["categories"] = len(config.categories)
    for problem in config.alias_problems.values():  # unset ${ENV} in a [models.NAME]
        report.add(problem)
    report.unset = config.unset_keys
    _check_models(config, report)
    _check_channels(config, report)
    _check_tools(config, report)
    await _check_mcp(config, report)
    # each file's problems together: the config's first, then each other file as first named
    files = [str(config.path), *(p.file for p in report.problems)]
    report.problems.sort(key=lambda p: files.index(p.file))
    report.problems = merge_agent_file_problems(config, report.problems)
    return report


def merge_agent_file_problems(config: Config, problems: list[ConfigError]) -> list[ConfigError]:
    """An agent file's problems as one message (its tools and its model together, each with
    its fix), in the place of its first; everything else as it was. Pure."""
    names = {agent.source: name for name, agent in config.agents.items() if agent.source}
    by_file: dict[str, list[ConfigError]] = {}
    for problem in problems:
        if problem.file in names:
            by_file.setdefault(problem.file, []).append(problem)
    merged: list[ConfigError] = []
    for problem in problems:
        group = by_file.get(problem.file, [problem])
        if len(group) < 2:
            merged.append(problem)
        elif problem is group[0]:
            prefix = f"agents.{names[problem.file]}"
            parts = [
                f"{p.key.removeprefix(prefix).lstrip('.') or p.key}: {p.problem}; {p.fix}"
                for p in group
            ]
            merged.append(
                ConfigError(
                    problem.file,
                    prefix,
                    " — and ".join(parts),
                    f"{len(group)} problems in this agent file, each with its fix",
                )
            )
    return merged


def report_record(report: CheckReport) -> dict[str, Any]:
    """The ``kernos config check --json`` document."""
    return {
        "ok": report.ok,
        "config": str(report.config_path) if report.config_path else None,
        "problems": [
            {"file": p.file, "key": p.key, "problem": p.problem, "fix": p.fix, "text": str(p)}
            for p in report.problems
        ],
        "checked": report.checked,
        "rules": report.rules,
        "windows": {
            name: {"context_window": w.window, "source": w.source}
            for name, w in report.windows.items()
        },
    }
