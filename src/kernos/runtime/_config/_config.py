"""``kernos.toml``, ``.kernos/agents/*.md`` and ``.claude/agents/*.md`` loaded into pydantic
models.

A config error is a developer mistake (the ``ConfigError`` family of :mod:`kernos.errors`):
:class:`ConfigError` names the file, the key and the fix, and the CLI turns it into exit 2.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from kernos.errors import NO_MODEL_MESSAGE as NO_MODEL_MESSAGE
from kernos.errors import NoModelError as NoModelError
from kernos.runtime._config._config_tables import (
    GENERAL_AGENT,
    AgentConfig,
    CategoryConfig,
    McpServerConfig,
    ModelAlias,
    ModelPrice,
    OutputConfig,
    PermissionsConfig,
    StoreConfig,
    TasksConfig,
    ToolConfig,
    WorkspaceConfig,
    _Budgeted,
    _Strict,
    general_agent,
)
from kernos.runtime._config._home import expand_env as expand_env
from kernos.runtime._config._home import kernos_home as kernos_home
from kernos.runtime._config._home import project_root as project_root
from kernos.runtime._config._windows import ModelWindow, model_window

# defined in _errors (light: the store raises it without building these models); kept here too
from kernos.runtime._errors import ConfigError as ConfigError
from kernos.runtime._rules._approval_state import DEFAULT_WAIT
from kernos.runtime._rules._budget import (
    CHILD_DEFAULTS,
    MAIN_DEFAULTS,
    Budget,
    pick_budget,
)
from kernos.runtime._rules._compaction import COMPACT_AT, KEEP_TURNS, CompactSettings
from kernos.runtime._rules._permissions import PermissionTable

#: kernos's own tools outside the tool catalog, and where each is configured: a ``[tools.NAME]``
#: function under one of these names would be dropped for kernos's (names ending in ``*`` are
#: prefixes). Listed here, not imported: runtime imports no subsystem (pyproject's contracts);
#: tests/runtime/test_config.py checks the list against the subsystems' real tools.
KERNOS_TOOLS = {
    "task": "the sub-agent tools: [tasks], [categories.NAME] and each agent's tools",
    "task_send": "the sub-agent tools: [tasks], [categories.NAME] and each agent's tools",
    "task_output": "the sub-agent tools: [tasks], [categories.NAME] and each agent's tools",
    "task_cancel": "the sub-agent tools: [tasks], [categories.NAME] and each agent's tools",
    "output_list_channels": "the output tools: [channels.NAME] and each agent's allowed_outputs",
    "output_send__*": "the output tools: [channels.NAME] and each agent's allowed_outputs",
    "compress": "`kernos mcp`, which serves the compress tool to hosts",
    "team_send": "the team tools: a lead's and its members' ([tasks] team_max_turns)",
    "team_status": "the team tools: a lead's and its members' ([tasks] team_max_turns)",
    "team_wait": "the team tools: a lead's and its members' ([tasks] team_max_turns)",
    "board_*": "the team tools: a lead's and its members' ([tasks] team_max_turns)",
}


def kernos_tool_home(name: str) -> str | None:
    """Where the kernos tool called ``name`` is configured, or None when no kernos tool has that
    name (see :data:`KERNOS_TOOLS`). Pure."""
    for reserved, where in KERNOS_TOOLS.items():
        if name == reserved or (reserved.endswith("*") and name.startswith(reserved[:-1])):
            return where
    return None


def _check_function_names(config: Config, file: Path, problems: list[ConfigError]) -> None:
    for name in list(config.tools):
        where = kernos_tool_home(name)
        if where is not None:
            problems.append(
                ConfigError(
                    file,
                    f"tools.{name}",
                    f"{name!r} is a kernos tool, configured elsewhere ({where})",
                    "give the function another name: a [tools.NAME] function cannot replace it",
                )
            )
            del config.tools[name]


_MCP_SERVER_NAME = re.compile(r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$")


class Config(_Strict):
    """The whole ``kernos.toml``."""

    #: the model when neither ``--model`` nor ``KERNOS_MODEL`` names one: a model string or
    #: a ``[models.NAME]`` alias
    default_model: str | None = None
    #: schema-invalid calls of one tool a session answers with a retry prompt before the run fails
    retries: int = Field(default=3, ge=0)
    models: dict[str, ModelAlias] = Field(default_factory=dict)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    categories: dict[str, CategoryConfig] = Field(default_factory=dict)
    #: ``[channels.NAME]``: an output channel; ``kind`` (``file``, ``webhook``, ``email``,
    #: ``apprise``, ``onebot``, ``console`` or a plugin's) and that kind's own keys
    channels: dict[str, dict[str, Any]] = Field(default_factory=dict)
    tools: dict[str, ToolConfig] = Field(default_factory=dict)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    mcp: dict[str, McpServerConfig] = Field(default_factory=dict)
    permissions: PermissionsConfig = Field(default_factory=PermissionsConfig)
    path: Path | None = Field(default=None, exclude=True)
    #: what relative paths in the config are read against: the config file's directory
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)
    home: Path = Field(default=Path(".kernos"), exclude=True)
    #: the PostgreSQL store's URL (``KERNOS_STORE_URL``, else ``[store] url``); None → SQLite
    store_url: str | None = Field(default=None, exclude=True)
    #: model aliases whose ``${ENV}`` references are unset: the error, raised only when used
    alias_problems: dict[str, Any] = Field(default_factory=dict, exclude=True)
    #: keys whose value named an unset ``${ENV}`` (read as ``""``): what else is wrong with that
    #: value follows from it, and ``config check`` does not report it again
    unset_keys: frozenset[str] = Field(default_factory=frozenset, exclude=True)

    @field_validator("mcp")
    @classmethod
    def _mcp_names(cls, servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in servers:
            if not _MCP_SERVER_NAME.match(name):
                raise PydanticCustomError(
                    "mcp_name",
                    "server name '{name}' is not usable as a tool prefix: use letters, digits, "
                    "'-' and single '_'",
                    {"name": name},
                )
        return servers

    def empty_retries(self, model: str) -> int:
        """``[models.NAME] empty_retries`` of the model called ``model`` (2 for a model string)."""
        alias = self.models.get(model)
        return alias.empty_retries if alias is not None else 2

    def model_window(self, model: str) -> ModelWindow:
        """The context window of the model called ``model`` and where it came from
        (runtime/_config/_windows.py): its declared ``context_window``, else genai-prices' data."""
        return model_window(model, self.models.get(model), os.environ.get("OPENAI_BASE_URL"))

    def prices(self) -> dict[str, ModelPrice]:
        """Each configured ``price`` under every name a usage row may carry for its model: the
        alias, its model string, and that string without its provider (``openai-chat:qwen3``
        is recorded as ``qwen3``). The first alias wins a name two of them share."""
        found: dict[str, ModelPrice] = {}
        for name, alias in self.models.items():
            if alias.price is None:
                continue
            for key in (name, alias.model, alias.model.partition(":")[2]):
                if key:
                    found.setdefault(key, alias.price)
        return found

    def agent(self, name: str) -> AgentConfig:
        """The agent called ``name``; ``main`` and ``general`` exist even when not configured."""
        if name in self.agents:
            return self.agents[name]
        if name == "main":
            return AgentConfig()
        if name == GENERAL_AGENT:
            return general_agent()
        known = ", ".join(sorted(self.spawnable_agents))
        raise ConfigError(
            self.path,
            f"agents.{name}",
            f"no agent named {name!r}",
            f"define [agents.{name}] or .kernos/agents/{name}.md; known agents: {known}",
        )

    def permission_tables(self, agent: str) -> list[PermissionTable]:
        """The permission tables a call by ``agent`` is decided under, most specific first: its
        own ``[agents.NAME.permissions]`` (when it has one), then ``[permissions]``."""
        own = self.agents[agent].permissions if agent in self.agents else None
        tables = [own.table(f"agents.{agent}.permissions")] if own is not None else []
        return [*tables, self.permissions.table("permissions")]

    def approval_wait(self, agent: str) -> float:
        """How long an asked call of ``agent``'s that nobody here can answer waits for an
        answer from the store, in seconds (``0``: not at all): its own ``[agents.NAME.
        permissions] wait``, else ``[permissions] wait``, else an hour."""
        own = self.agents[agent].permissions if agent in self.agents else None
        for table in (own, self.permissions):
            if table is not None and table.wait is not None:
                return table.wait
        return DEFAULT_WAIT

    @property
    def spawnable_agents(self) -> dict[str, AgentConfig]:
        """The agents a ``task`` call may name: the configured ones and the built-in
        ``general`` (:func:`general_agent`), which a configured agent of that name replaces."""
        return {GENERAL_AGENT: general_agent(), **self.agents}

    def task_budget(self, category: str | None = None, agent: str | None = None) -> Budget:
        """The limits of a child run on ``category`` or as ``agent``: its own keys, else the
        ``[tasks]`` defaults, else kernos's (``CHILD_DEFAULTS``)."""
        target: _Budgeted | None = None
        if category is not None:
            target = self.categories.get(category)
        elif agent is not None:
            target = self.agents.get(agent)
        return pick_budget(self.tasks, target, fallback=CHILD_DEFAULTS)

    def compaction(
        self,
        model: str,
        category: str | None = None,
        agent: str | None = None,
        *,
        manual: bool = False,
    ) -> CompactSettings | None:
        """How a session on ``model`` as ``category`` or ``agent`` compacts: the target's own
        keys, else ``[tasks]``, else the defaults; ``None`` when the model declares no
        window and genai-prices knows none, or declares 0 (no automatic compaction), unless
        ``manual`` (compaction by hand: window 0 when none is known)."""
        window = self.model_window(model).window
        if not window and not manual:
            return None
        target: _Budgeted | None = None
        if category is not None:
            target = self.categories.get(category)
        elif agent is not None:
            target = self.agents.get(agent)

        def pick(key: str) -> Any:
            for source in (target, self.tasks):
                value = getattr(source, key, None) if source is not None else None
                if value is not None:
                    return value
            return None

        at, keep = pick("compact_at"), pick("keep_turns")
        return CompactSettings(
            window=window or 0,
            at=COMPACT_AT if at is None else at,
            keep_turns=KEEP_TURNS if keep is None else keep,
            model=pick("compact_model"),
        )

    def agent_budget(self, name: str) -> Budget:
        """The limits of a top-level session of agent ``name`` (``kernos run``): the agent's own
        keys, else kernos's (``MAIN_DEFAULTS``); the ``[tasks]`` defaults are for children."""
        return pick_budget(None, self.agents.get(name), fallback=MAIN_DEFAULTS)
