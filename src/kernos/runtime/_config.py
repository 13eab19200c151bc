"""``kernos.toml``, ``.kernos/agents/*.md`` and ``.claude/agents/*.md`` loaded into pydantic
models.

A config error is a developer mistake (the ``ConfigError`` family of :mod:`kernos.errors`):
:class:`ConfigError` names the file, the key and the fix, and the CLI turns it into exit 2.
"""

from __future__ import annotations

import copy
import os
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from kernos.errors import NO_MODEL_MESSAGE as NO_MODEL_MESSAGE
from kernos.errors import NoModelError as NoModelError
from kernos.runtime._approval_state import DEFAULT_WAIT, WAIT_FIX
from kernos.runtime._budget import (
    CHILD_DEFAULTS,
    COUNT_FIX,
    DURATION_FIX,
    MAIN_DEFAULTS,
    Budget,
    parse_count,
    parse_duration,
    pick_budget,
)
from kernos.runtime._claude import CLAUDE_CODE_MODELS, map_claude_tools
from kernos.runtime._compaction import COMPACT_AT, KEEP_TURNS, CompactSettings

# defined in _errors (light: the store raises it without building these models); kept here too
from kernos.runtime._dialect import is_postgres_url
from kernos.runtime._errors import ConfigError as ConfigError
from kernos.runtime._home import (
    _read_text,
    check_depth,
    config_file,
    expand_env,
    load_toml,
    register_config_urls,
    substitute_env,
    too_deep,
)
from kernos.runtime._home import kernos_home as kernos_home
from kernos.runtime._home import project_root as project_root
from kernos.runtime._permissions import PermissionTable, parse_entry
from kernos.runtime._secrets import register_secrets
from kernos.runtime._windows import ModelWindow, model_window


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Budgeted(_Strict):
    """The budget keys an agent, a category and ``[tasks]`` (the defaults) share: ``timeout``
    (wall clock, ``"10m"``), ``max_turns`` (model requests), ``max_tokens`` (input + output),
    ``max_tool_calls_per_turn`` (the tool calls of one model answer that run); ``0`` is no
    limit, and unset keys take kernos's defaults (``_budget.MAIN_DEFAULTS``/``CHILD_DEFAULTS``)."""

    #: wall-clock limit of one run, a duration (``"30s"``, ``"10m"``, ``"1h30m"``); ``0``: none
    timeout: float | None = None
    #: model requests one run may make; ``0``: no limit
    max_turns: int | None = None
    #: input + output tokens one run may use; ``0``: no limit
    max_tokens: int | None = None
    #: tool calls of one model answer that run (the rest are refused); ``0``: no limit
    max_tool_calls_per_turn: int | None = None

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise PydanticCustomError("duration", str(exc)) from None

    @field_validator("max_turns", "max_tokens", "max_tool_calls_per_turn", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse_count(value)
        except ValueError as exc:
            raise PydanticCustomError("count", str(exc)) from None


class _Compacting(_Strict):
    """The compaction keys an agent, a category and ``[tasks]`` share (runtime/_compaction.py);
    an agent's or category's unset key takes ``[tasks]``'s, else the default."""

    #: the fraction of the model's ``context_window`` at which a session compacts its middle
    #: turns before its next request (default 0.8)
    compact_at: float | None = Field(default=None, gt=0, le=1)
    #: the newest turns a compaction keeps as they are (default 4)
    keep_turns: int | None = Field(default=None, ge=0)
    #: the model (string or alias) that writes a compaction's summary; unset: the session's
    compact_model: str | None = None


#: a price per million tokens: a number (an integer or a decimal), 0 or more
_PerMillion = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]


class ModelPrice(_Strict):
    """``[models.NAME] price = { input = 0.15, output = 0.60 }``: USD per million tokens, for a
    model genai-prices does not know (or to override it); ``cached`` is the price of cached input
    tokens (default: ``input``)."""

    input: _PerMillion
    output: _PerMillion
    cached: _PerMillion | None = None


class ModelAlias(_Strict):
    """``[models.NAME]``: a named model with its own endpoint."""

    #: the model string (``openai-chat:qwen3``, ``anthropic:claude-sonnet-4-5``, ...)
    model: str
    #: the OpenAI-compatible endpoint, e.g. ``http://127.0.0.1:11434/v1`` (Ollama)
    base_url: str | None = None
    #: the environment variable holding the key (the value is never written in the file)
    api_key_env: str | None = None
    #: children running on this model at once, across processes on one store (its queue's
    #: limit); unset: ``[tasks] concurrency``
    concurrency: int | None = Field(default=None, ge=0)
    #: ignored (accepted so that an older kernos.toml still loads): every model runs on kernos's
    #: own loop
    engine: Literal["lean", "pydantic-ai"] | None = None
    #: retries of one request after a 429, a 5xx or a connection error (openai-chat models)
    request_retries: int = Field(default=2, ge=0)
    #: seconds one attempt at a request may take (openai-chat models)
    request_timeout: float = Field(default=600.0, gt=0)
    #: answers with no text and no tool call retried before the run fails
    empty_retries: int = Field(default=2, ge=0)
    #: its price per million tokens; wins over genai-prices' data for this model
    price: ModelPrice | None = None
    #: its context window in tokens; a session on it compacts its middle turns when its next
    #: request would pass ``compact_at`` of it; unset: genai-prices' window for its model, if it
    #: knows one (else no automatic compaction); 0: no automatic compaction
    context_window: int | None = Field(default=None, ge=0)


class PermissionsConfig(_Strict):
    """``[permissions]`` or ``[agents.NAME.permissions]`` (which wins): which tool calls run,
    are asked about first, or are refused (see :mod:`kernos.runtime._permissions`)."""

    #: tool-name globs whose calls run; an entry may add a path glob: ``"write_file(docs/**)"``
    allow: list[str] = Field(default_factory=list)
    #: tool-name globs whose calls a person approves first (on the terminal, ``--approve``)
    ask: list[str] = Field(default_factory=list)
    #: tool-name globs never offered to the model (with a path glob: refused on those paths)
    deny: list[str] = Field(default_factory=list)
    #: the rule of a tool in no list and with no default of its own; unset: ``"allow"``
    default: Literal["allow", "ask", "deny"] | None = None
    #: how long a background child's asked call waits for `kernos approve`/`deny` (a
    #: duration); past it the call is denied; ``"0"``: never wait, deny at once; unset: ``"1h"``
    wait: float | None = None

    @field_validator("wait", mode="before")
    @classmethod
    def _wait(cls, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise PydanticCustomError("wait_duration", str(exc)) from None

    @field_validator("allow", "ask", "deny")
    @classmethod
    def _entries(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            try:
                parse_entry(entry)
            except ValueError as exc:
                raise PydanticCustomError("permission_rule", "{msg}", {"msg": str(exc)}) from None
        return entries

    def table(self, where: str) -> PermissionTable:
        """The parsed table, named ``where`` in reasons and errors."""
        return PermissionTable(
            where,
            allow=tuple(parse_entry(e) for e in self.allow),
            ask=tuple(parse_entry(e) for e in self.ask),
            deny=tuple(parse_entry(e) for e in self.deny),
            default=self.default,
        )


class AgentConfig(_Budgeted, _Compacting):
    """``[agents.NAME]`` or ``.kernos/agents/NAME.md``."""

    #: what the agent is for: the ``task`` tool's description shows it to the parent model
    description: str = ""
    #: the system prompt (an agent file's body)
    instructions: str = ""
    #: its model string or alias; unset: ``default_model`` (a child: its parent's model)
    model: str | None = None
    #: names or globs of the tools it may use; no key: the built-in workspace tools
    tools: list[str] | None = None
    #: the channels its ``output_send__*`` tools may use; empty: every channel
    allowed_outputs: list[str] = Field(default_factory=list)
    #: its own permission rules, consulted before ``[permissions]``
    permissions: PermissionsConfig | None = None
    source: str | None = Field(default=None, exclude=True)


#: the built-in agent every project has, for the ``task`` tool (:func:`general_agent`)
GENERAL_AGENT = "general"


@cache
def _general_instructions() -> str:
    return resources.files("kernos.runtime").joinpath("general_agent.md").read_text("utf-8").strip()


def general_agent() -> AgentConfig:
    """The built-in ``general`` agent: our own short instructions (``general_agent.md``), the
    built-in tools (no ``tools`` key) and no model of its own: as a child it runs on its parent's
    model. An ``[agents.general]`` or ``.kernos/agents/general.md`` replaces it."""
    return AgentConfig(
        description="General-purpose helper for research and multi-step work, on your own model",
        instructions=_general_instructions(),
    )


class ToolConfig(_Strict):
    """``[tools.NAME]``: a Python function offered to agents as the tool ``NAME``."""

    #: the function, ``module:attribute`` (importable from the project directory)
    function: str
    #: what the model reads; unset: the function's docstring
    description: str | None = None


class CategoryConfig(_Budgeted, _Compacting):
    """``[categories.NAME]``: a generic worker on the category's model."""

    #: what the category is for: the ``task`` tool's description shows it to the parent model
    description: str = ""
    #: the model its children run on; unset: ``default_model``
    model: str | None = None
    #: the system prompt of its children
    instructions: str = ""


class TasksConfig(_Budgeted, _Compacting):
    """``[tasks]``: sub-agent limits; ``timeout``, ``max_turns``, ``max_tokens`` are every
    child's defaults (an agent's or a category's own keys win)."""

    #: how deep children may spawn children (1: only the top-level session spawns)
    max_depth: int = Field(default=1, ge=0)
    #: children running at once per model (a ``[models.NAME] concurrency`` wins)
    concurrency: int = Field(default=5, ge=0)
    #: children one run may start (its root session and every descendant; each ``task_send``
    #: revival counts too); past it ``task`` answers ``too_many_children``; ``0``: no limit
    max_children: int = Field(default=64, ge=0)
    #: the identical successful tool call in a row (same tool, same arguments) whose result
    #: starts with a coded ``repeated_call`` note (the model already has it); ``0``: off
    repeat_limit: int = Field(default=3, ge=0)
    #: which engine runs children: ``local`` (in this process), ``dbos`` (DBOS queues, shared by
    #: every process on the same store), ``auto`` (``dbos`` on Postgres, else ``local``)
    engine: Literal["auto", "local", "dbos"] = "auto"
    #: ``kernos run`` executes queued children too (``dbos`` engine); false: only workers do
    run_executes: bool = True
    #: a child whose executor died: ``resume`` from its last completed step, or ``lost``;
    #: ``auto`` is ``resume`` on Postgres, ``lost`` on SQLite
    on_crash: Literal["auto", "resume", "lost"] = "auto"
    #: seconds between executor heartbeats; an executor silent for 3 beats is dead
    heartbeat: float = Field(default=5.0, gt=0)
    #: ``dbos`` engine: split each model's concurrency among the live executors that serve its
    #: queue, so a burst of children spreads over the fleet instead of piling up on the first
    #: executor to poll; false: whichever executor polls first takes all the limit allows
    spread: bool = True
    #: ``dbos`` engine: seconds between an executor's polls of its queues, so how soon a queued
    #: child starts; each poll costs every executor CPU, queue or no queue (one queue's row holds
    #: it for the fleet: the last process to register the queue sets it)
    poll: float = Field(default=0.1, gt=0, le=60)
    #: model requests all the members of one team may make together (each revival by mail is
    #: a new run with its own budget, so this is what stops two members mailing each other
    #: forever); past it a member's run ends ``budget_exceeded``; ``0``: no limit
    team_max_turns: int = Field(default=200, ge=0)


STORE_URL_ENV = "KERNOS_STORE_URL"


class StoreConfig(_Strict):
    """``[store]``: where kernos keeps its state. ``url = "postgresql://user:password@host:port/db"``
    (or ``KERNOS_STORE_URL``, which wins) puts it in PostgreSQL, shared by many processes and
    hosts; absent → the SQLite file ``kernos.db`` in the kernos home."""

    #: ``postgresql://user:password@host:port/database``; unset: SQLite in the kernos home
    url: str | None = None


def store_url_problem(url: str) -> str | None:
    """Why ``url`` cannot name a store, or None (pure: the scheme is checked, not the server)."""
    scheme, sep, _ = url.strip().partition("://")
    if not sep:
        return f"{_shown(url)!r} is not a URL"
    if not is_postgres_url(url):
        return f"unknown scheme {scheme + '://'!r} (the store takes postgresql://)"
    return None  # no host is libpq's default socket; what is wrong with the rest, connecting says


def _shown(url: str) -> str:
    """``url`` with anything between ``:`` and ``@`` (a password) hidden."""
    return re.sub(r"(//[^/:@]*:)[^@/]*@", r"\1***@", url)


def _resolve_store_url(config_url: str | None, file: Path | None) -> str | None:
    """``KERNOS_STORE_URL`` if set, else ``[store] url``; checked, its password made a secret.

    Raises:
        ConfigError: the URL's scheme is not PostgreSQL's, or it is not a URL.
    """
    env = os.environ.get(STORE_URL_ENV, "").strip()
    if env:
        url, where, key = env, "(environment)", STORE_URL_ENV
        fix = "set it to postgresql://user:password@host:port/database, or unset it to use SQLite"
    elif config_url is not None and config_url.strip():
        url, where, key = config_url.strip(), str(file) if file else "(config)", "store.url"
        fix = "write postgresql://user:password@host:port/database, or remove it to use SQLite"
    else:
        return None
    from urllib.parse import unquote, urlsplit

    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        register_secrets(password, unquote(password))
    problem = store_url_problem(url)
    if problem is not None:
        raise ConfigError(where, key, problem, fix)
    return url


def peek_store_url(root: Path) -> tuple[str, str] | None:
    """``(url, why)`` of the store a command in project ``root`` would use, for ``kernos -v``:
    ``KERNOS_STORE_URL``, else ``[store] url`` of ``root/kernos.toml`` (read without validating
    the rest; ``${ENV}`` references expanded where set). None → the SQLite file."""
    env = os.environ.get(STORE_URL_ENV, "").strip()
    if env:
        return env, STORE_URL_ENV
    file = root / "kernos.toml"
    try:
        data = load_toml(file) if file.is_file() else {}
    except ConfigError:
        return None
    table = data.get("store")
    url = table.get("url") if isinstance(table, dict) else None
    if not isinstance(url, str) or not url.strip():
        return None
    expanded = substitute_env(url.strip(), lambda name: os.environ.get(name, f"${{{name}}}"))
    return expanded, f"[store] url in {file}"


class OutputConfig(_Strict):
    """``[output]``: limits for ``output_send__*`` calls."""

    #: messages one ``output_send__*`` call may carry
    max_items: int = Field(default=20, ge=1)


class WorkspaceConfig(_Strict):
    """``[workspace]``: where model-supplied paths may lead (see :class:`WorkspacePolicy`)."""

    #: the directories model-supplied paths must resolve inside (relative to the config file)
    roots: list[str] = Field(default_factory=lambda: ["."], min_length=1)
    #: hidden files and directories (``.git``, ``.env``) may be read and attached
    allow_hidden: bool = False
    #: the largest file a model may attach or read, in bytes
    max_attachment_bytes: int = Field(default=25 * 1024 * 1024, ge=0)


class McpServerConfig(_Strict):
    """``[mcp.NAME]``: an MCP server whose tools are offered as ``NAME__<tool>``.

    Exactly one of ``command`` (stdio: ``args``, ``env``, ``cwd``) or ``url`` (Streamable HTTP,
    with ``headers``). ``timeout`` bounds the start and each call, in seconds; ``include`` /
    ``exclude`` are globs over the server's own tool names. Each progress notification of a call
    restarts its ``timeout``, up to ``max_timeout`` (default 10 × ``timeout``) in all.
    ``max_result_bytes`` caps the text of one result (UTF-8 bytes; the rest is cut with a marker
    before the model or the store sees it). ``per_session``: ``kernos mcp`` starts
    one copy per client session instead of one shared by every session (a server that keeps
    per-client state).
    """

    #: a stdio server: the program to start
    command: str | None = None
    #: its arguments
    args: list[str] = Field(default_factory=list)
    #: extra environment variables for it (``${ENV}`` references allowed)
    env: dict[str, str] = Field(default_factory=dict)
    #: its working directory; unset: the project directory
    cwd: str | None = None
    #: a Streamable HTTP server: its URL
    url: str | None = None
    #: HTTP headers sent to it (``${ENV}`` references allowed)
    headers: dict[str, str] = Field(default_factory=dict)
    #: seconds the start may take, and a call without an answer or a progress notification
    timeout: float = Field(default=60.0, gt=0)
    #: seconds a call may take in all, progress or not; unset: 10 × ``timeout``
    max_timeout: float | None = Field(default=None, gt=0)
    #: globs over the server's own tool names to offer; empty: every tool
    include: list[str] = Field(default_factory=list)
    #: globs over the server's own tool names to leave out
    exclude: list[str] = Field(default_factory=list)
    #: the UTF-8 bytes of one result's text the model sees (the rest is cut with a marker)
    max_result_bytes: int = Field(default=1_048_576, ge=1024)
    #: ``kernos mcp`` starts one copy per client session instead of one shared copy
    per_session: bool = False
    # -- OAuth (a url server only): ``kernos mcp login NAME`` stores its tokens in the state
    # directory; runs refresh them and never wait for a browser
    #: ``"oauth"``: the server needs the MCP authorization flow (``kernos mcp login NAME``);
    #: unset: a url server whose 401 names its resource metadata is found to need it
    auth: Literal["oauth"] | None = None
    #: a pre-registered OAuth client's id (unset: dynamic registration, or client_metadata_url)
    client_id: str | None = None
    #: the environment variable holding that client's secret (a confidential client)
    client_secret_env: str | None = None
    #: scopes asked for at login, besides those the server asks for
    scopes: list[str] = Field(default_factory=list)
    #: an HTTPS URL of this client's metadata document, used as its client id where the
    #: authorization server supports it (Client ID Metadata Documents)
    client_metadata_url: str | None = None

    @property
    def call_limit(self) -> float:
        """Seconds one call may take in all: ``max_timeout``, or 10 × ``timeout`` (never less
        than ``timeout``)."""
        return max(self.timeout, self.max_timeout or 10 * self.timeout)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise PydanticCustomError(
                "mcp_transport",
                "set exactly one of command (a stdio server) or url (Streamable HTTP)",
            )
        given = {
            "client_id": self.client_id is not None,
            "client_secret_env": self.client_secret_env is not None,
            "scopes": bool(self.scopes),
            "client_metadata_url": self.client_metadata_url is not None,
        }
        oauth_keys = [key for key, present in given.items() if present]
        if self.auth is None and oauth_keys:
            raise PydanticCustomError(
                "mcp_oauth",
                '{keys} apply to auth = "oauth" only: add it, or remove them',
                {"keys": ", ".join(oauth_keys)},
            )
        if self.auth == "oauth" and self.url is None:
            raise PydanticCustomError(
                "mcp_oauth", 'auth = "oauth" needs a url server (Streamable HTTP), not a command'
            )
        if self.client_secret_env is not None and self.client_id is None:
            raise PydanticCustomError(
                "mcp_oauth", "client_secret_env needs the client_id it belongs to"
            )
        url = self.client_metadata_url
        if url is not None and not re.match(r"^https://[^/\s]+/\S+$", url):
            raise PydanticCustomError(
                "mcp_oauth",
                "client_metadata_url must be an https URL with a path (the metadata document)",
            )
        return self


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
        (runtime/_windows.py): its declared ``context_window``, else genai-prices' data."""
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


def _strip_env(value: Any) -> Any:
    if isinstance(value, str):
        return substitute_env(value, lambda name: "")
    if isinstance(value, dict):
        return {k: _strip_env(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_env(v) for v in value]
    return value


def _expand_env_lazily(
    data: dict[str, Any], file: Path | None, problems: list[ConfigError]
) -> tuple[dict[str, Any], dict[str, ConfigError]]:
    """Expand ``${ENV}`` everywhere; a ``[models.NAME]`` table whose variable is unset is kept
    with the reference blanked and its error returned (the first, with the others in
    ``others``), so only a command using that model fails. An unset variable outside
    ``[models.*]`` is appended to ``problems`` and expands to ``""``."""
    models = data.get("models")
    rest = expand_env({k: v for k, v in data.items() if k != "models"}, file, "", problems)
    if not isinstance(models, dict):
        return ({**rest, "models": models} if "models" in data else rest), {}
    deferred: dict[str, ConfigError] = {}
    expanded: dict[str, Any] = {}
    for alias, table in models.items():
        unset: list[ConfigError] = []
        expanded[alias] = expand_env(table, file, f"models.{alias}", unset)
        if unset:
            unset[0].others = unset[1:]
            deferred[alias] = unset[0]
    return {**rest, "models": expanded}, deferred


_HIDDEN_FIELDS = frozenset(
    {"path", "base_dir", "home", "store_url", "alias_problems", "unset_keys", "source"}
)


def _known_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys the table at ``loc`` (a pydantic error location, its last part the key) takes."""
    import typing

    parts = list(loc[:-1])
    while parts:
        field = model.model_fields.get(str(parts.pop(0)))
        if field is None:
            return []
        target: Any = field.annotation
        if typing.get_origin(target) is dict:
            target = typing.get_args(target)[1]
            if not parts:
                return []
            parts.pop(0)  # the table's own name: [agents.NAME]
        if not (isinstance(target, type) and issubclass(target, BaseModel)):
            return []
        model = target
    return [name for name in model.model_fields if name not in _HIDDEN_FIELDS]


def unknown_key_fix(key: str, known: list[str]) -> str:
    """What to write instead of the unknown ``key``: the nearest of ``known``, else remove it.
    Pure."""
    import difflib

    near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if near:
        return f"did you mean {near[0]!r}? (or remove it)"
    return "remove it or check its spelling in the docs"


def _validation_problem(
    file: Path | None, prefix: str, issue: Any, model: type[BaseModel]
) -> ConfigError:
    key = ".".join(str(p) for p in (prefix, *issue["loc"]) if p != "")
    if issue["type"] == "extra_forbidden":
        known = _known_keys(model, tuple(issue["loc"]))
        return ConfigError(file, key, "unknown key", unknown_key_fix(str(issue["loc"][-1]), known))
    if issue["type"] == "missing":
        return ConfigError(file, key, "required key is missing", "add it")
    if issue["type"] == "duration":
        return ConfigError(file, key, issue["msg"], DURATION_FIX)
    if issue["type"] == "count":
        return ConfigError(file, key, issue["msg"], COUNT_FIX)
    if issue["type"] == "wait_duration":  # [permissions] wait: 0 is "never wait", not "no limit"
        return ConfigError(file, key, issue["msg"], WAIT_FIX)
    return ConfigError(file, key, issue["msg"], "correct the value")


_M = TypeVar("_M", bound=BaseModel)


def _drop(data: dict[str, Any], loc: tuple[Any, ...], depth: int) -> None:
    """Remove what ``loc`` points at (at most ``depth`` parts deep; a list item takes its list)."""
    path: list[Any] = []
    for part in loc[:depth]:
        if not isinstance(part, str):
            break
        path.append(part)
    node: Any = data
    for part in path[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and path:
        if path[-1] in node:
            del node[path[-1]]
        elif len(path) > 1:  # a missing key: drop the table that lacks it
            _drop(data, tuple(path[:-1]), depth)


def _validate(
    model: type[_M],
    data: dict[str, Any],
    file: Path | None,
    prefix: str,
    problems: list[ConfigError],
) -> _M:
    """``data`` as ``model``; each problem is appended to ``problems`` and its value dropped, so
    the rest is still validated (and checked further) in the same pass."""
    data = copy.deepcopy(data)
    dropped: set[tuple[Any, ...]] = set()
    for depth in (99, 99, 2, 1):
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            issues = exc.errors(include_url=False)
            # a required key whose bad value was dropped is not missing too: said once
            said = [i for i in issues if i["type"] != "missing" or tuple(i["loc"]) not in dropped]
            new = [_validation_problem(file, prefix, i, model) for i in said]
            problems.extend(p for p in new if all(str(p) != str(q) for q in problems))
            for issue in issues:
                dropped.add(tuple(issue["loc"]))
                _drop(data, tuple(issue["loc"]), depth)
    return model.model_validate({})


def _raise_first(problems: list[ConfigError]) -> None:
    if problems:
        first = problems[0]
        first.others = problems[1:]
        raise first


def parse_agent_file(path: Path) -> AgentConfig:
    """Read ``.kernos/agents/NAME.md``: a ``---`` front-matter block, then the instructions.

    Raises:
        ConfigError: the first problem of the file, the others in ``others``.
    """
    problems: list[ConfigError] = []
    agent = _parse_agent_file(path, problems)
    _raise_first(problems)
    assert agent is not None
    return agent


def _parse_agent_file(path: Path, problems: list[ConfigError]) -> AgentConfig | None:
    """The agent file's definition, its problems appended to ``problems`` (None: unreadable)."""
    try:
        text = _read_text(path)
    except ConfigError as exc:
        problems.append(exc)
        return None
    meta: dict[str, Any] = {}
    body = text
    if text.startswith("---"):
        parts = text.split("\n---", 1)
        if len(parts) != 2:
            problems.append(
                ConfigError(
                    path, "front matter", "the --- block is not closed", "end it with a line '---'"
                )
            )
            return None
        head = parts[0][3:]
        body = parts[1].split("\n", 1)[1] if "\n" in parts[1] else ""
        import yaml  # only front matter needs it; a command that never reads agents skips it

        try:
            loaded = check_depth(yaml.safe_load(head) or {}, path, "front matter")
        except yaml.YAMLError as exc:
            problems.append(
                ConfigError(path, "front matter", f"not valid YAML ({exc})", "fix the --- block")
            )
            return None
        except RecursionError:  # PyYAML composes recursively, one level per bracket
            problems.append(too_deep(path, "front matter"))
            return None
        except ConfigError as exc:
            problems.append(exc)
            return None
        if not isinstance(loaded, dict):
            problems.append(
                ConfigError(path, "front matter", "not a mapping", "use 'key: value' lines")
            )
            return None
        meta = loaded
    meta.pop("name", None)
    if isinstance(meta.get("tools"), str):
        meta["tools"] = [t.strip() for t in meta["tools"].split(",") if t.strip()]
    if isinstance(meta.get("tools"), list) and all(isinstance(t, str) for t in meta["tools"]):
        meta["tools"] = map_claude_tools(meta["tools"])  # the convention of agent files
    meta["instructions"] = body.strip()
    agent = _validate(AgentConfig, meta, path, "", problems)
    agent.source = str(path)
    return agent


def agent_model_problem(config: Config, name: str) -> ConfigError | None:
    """Why agent ``name``'s own ``model`` cannot be used, or None: a Claude Code model name
    (``sonnet``, ``inherit``) that no ``[models.NAME]`` defines. Asked only when the agent's model
    is the one chosen (``--model`` wins without it). Pure."""
    agent = config.agents.get(name)
    model = ((agent.model if agent else None) or "").strip()
    if model in config.models or model.casefold() not in {*CLAUDE_CODE_MODELS, "inherit"}:
        return None
    where = (agent.source if agent else None) or config.path
    if model.casefold() == "inherit":
        return ConfigError(
            where,
            f"agents.{name}.model",
            "'inherit' is a Claude Code model name",
            "remove the model line: a kernos agent without one runs on the default model",
        )
    return ConfigError(
        where,
        f"agents.{name}.model",
        f"{model!r} is a Claude Code model name and no [models.{model}] defines it",
        f"define [models.{model}] with the model it stands for, or write a provider:model "
        f"string such as {CLAUDE_CODE_MODELS[model.casefold()]}",
    )


def _load_agent_files(config: Config, file: Path, cwd: Path, problems: list[ConfigError]) -> None:
    """Add the agent files to ``config.agents``: ``.kernos/agents/*.md`` (one named like an
    ``[agents.NAME]`` is a problem), then Claude Code's ``.claude/agents/*.md`` in the project
    root, whose agents a kernos definition of the same name replaces (that directory is another
    tool's, so shadowing one of its agents is how a project adapts it to kernos)."""
    agents_dir = config.home / "agents"
    if agents_dir.is_dir():
        for md in sorted(agents_dir.glob("*.md")):
            name = md.stem
            if name in config.agents:
                problems.append(
                    ConfigError(
                        md,
                        f"agents.{name}",
                        f"agent {name!r} is also defined in {file.name}",
                        "keep one definition",
                    )
                )
                continue
            agent = _parse_agent_file(md, problems)
            if agent is not None:
                config.agents[name] = agent
    claude_dir = project_root(cwd) / ".claude" / "agents"
    if claude_dir.is_dir():
        for md in sorted(claude_dir.glob("*.md")):
            if md.stem in config.agents:
                continue
            agent = _parse_agent_file(md, problems)
            if agent is not None:
                config.agents[md.stem] = agent


def load_config(path: Path | str | None = None, *, cwd: Path | None = None) -> Config:
    """Load ``kernos.toml`` (``path``, else the project root's — see :func:`project_root`;
    absent → defaults).

    Raises:
        ConfigError: unreadable TOML, an unknown key, a bad value or a missing ``${ENV}``: the
            first problem, every other one of the same pass in its ``others``.
    """
    config, problems = load_config_problems(path, cwd=cwd)
    _raise_first(problems)
    return config


def load_config_problems(
    path: Path | str | None = None, *, cwd: Path | None = None
) -> tuple[Config, list[ConfigError]]:
    """Load ``kernos.toml`` and the agent files as :func:`load_config` does, but collect every
    problem instead of raising the first: a bad value is dropped (its default applies) and the
    rest is still read, so one pass finds them all (``kernos config check``).

    Returns:
        the configuration made of what is valid, and the problems in file order (none: valid).
    """
    problems: list[ConfigError] = []
    cwd = cwd or Path.cwd()
    try:
        file, data = config_file(path, cwd=cwd)
    except ConfigError as exc:  # nothing of this file can be read; the agent files still can
        problems.append(exc)
        file, data = Path(path) if path is not None else project_root(cwd) / "kernos.toml", {}
    data, alias_problems = _expand_env_lazily(data, file, problems)
    unset = frozenset(
        [p.key for p in problems if p.file == str(file)]
        + [q.key for p in alias_problems.values() for q in (p, *p.others)]
    )
    register_config_urls(data)
    invalid: list[ConfigError] = []
    config = _validate(Config, data, file, "", invalid)
    problems += [p for p in invalid if p.key not in unset]  # "" for an unset ${ENV}: said once
    config.unset_keys = unset
    config.path = file if file.exists() else None
    _check_function_names(config, file, problems)
    config.alias_problems = alias_problems
    config.base_dir = file.parent.absolute()
    config.home = kernos_home(cwd)
    try:
        config.store_url = _resolve_store_url(config.store.url, config.path)
    except ConfigError as exc:
        problems.append(exc)
    _load_agent_files(config, file, cwd, problems)
    for name, agent in config.agents.items():
        if agent.model is not None and not agent.model.strip():
            where = agent.source or file
            problems.append(
                ConfigError(where, f"agents.{name}.model", "is blank", "remove it or name a model")
            )
            agent.model = None
    return config, problems
