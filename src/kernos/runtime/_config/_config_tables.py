"""The tables of ``kernos.toml`` below the top level (``[agents.NAME]``, ``[tasks]``,
``[store]``, ``[mcp_servers.NAME]``, ...) as pydantic models, held by
:class:`kernos.runtime._config._config.Config`."""

from __future__ import annotations

import os
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from kernos.runtime._config._home import (
    load_toml,
    substitute_env,
)
from kernos.runtime._errors import ConfigError
from kernos.runtime._rules._budget import (
    parse_count,
    parse_duration,
)
from kernos.runtime._rules._permissions import PermissionTable, parse_entry
from kernos.runtime._secrets import register_secrets
from kernos.runtime._store._dialect import is_postgres_url


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
    """The compaction keys an agent, a category and ``[tasks]`` share
    (runtime/_rules/_compaction.py); an agent's or category's unset key takes ``[tasks]``'s, else
    the default."""

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
    are asked about first, or are refused (see :mod:`kernos.runtime._rules._permissions`)."""

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
    return (
        resources.files("kernos.runtime._config")
        .joinpath("general_agent.md")
        .read_text("utf-8")
        .strip()
    )


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
