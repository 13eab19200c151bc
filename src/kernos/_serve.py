"""``kernos mcp``: kernos's tools served to other agent hosts over MCP.

The host (Claude Code, Cursor, OpenCode, Codex) is the model here. Each MCP connection gets one
kernos :class:`~kernos.runtime.Session` of the agent, opened by :func:`agent_session` with every
tool ``kernos run`` would give it, plus ``compress``. The session is never prompted: it is the
parent of the connection's task children and holds their completion notices until the host's next
tool call. Its task tools see only its own children (``task_output`` of another session's task
is ``unknown_task``), so which kernos session a request lands in is what keeps clients apart:

- **stdio**: one connection, one session.
- **HTTP, session era** (the 2025-11-25 handshake): one kernos session per *SDK* session. The
  SDK's :class:`~mcp.server.streamable_http_manager.StreamableHTTPSessionManager` mints the
  ``Mcp-Session-Id`` at ``initialize`` and answers 404 to any id it did not mint, so a request
  reaches a handler only on a session the SDK verified; kernos keys on the SDK connection's id,
  never on the raw header. The kernos session opens on the session's first request and closes
  (children cancelled, per-session MCP servers stopped) when the SDK ends the session: an HTTP
  ``DELETE``, ``--session-idle`` without a request, or the server's exit. ``--max-sessions`` is the
  SDK's limit: past it a new session gets HTTP 503 and nothing is opened.
- **HTTP, 2026-07-28** (no sessions in the protocol): a request carries nothing that tells clients
  apart except its credentials, and kernos has one bearer token (``--token-env``), so every client
  holding it is one principal. Such requests share **one** stateless kernos session, whatever
  ``Mcp-Session-Id`` header they send: a made-up or copied header creates nothing and attaches to
  nothing. A fresh session per request would be no safer and would be useless: a background child
  would be cancelled when its request ended, and ``task_output`` could never read it. Clients
  that must not see each other's tasks use the session era (or a server each).

Session ids are secrets of their clients: logs show :func:`session_tag`, never the id.

The server starts without a usable model (no model named, no API key in its environment: hosts
hide a server's stderr, so a server that exits says nothing): every tool is listed, and a call of
a tool that needs the model (:data:`MODEL_TOOLS`) answers the coded ``config_error`` saying what to
set in the host's MCP config ``env`` (:func:`model_config_error`).

The ``[mcp.NAME]`` servers are the process's (:class:`kernos._app.SharedMcpServers`): started
once, shared by every session, stopped when the server exits; a server whose table says
``per_session = true`` is started and stopped by each session.

Built on the SDK's low-level :class:`mcp.server.lowlevel.Server`, whose ``tools/call`` handler gets
the arguments as sent, so every call goes through :func:`kernos.boundary.call_tool` raw (padding
normalized before the schema, coded errors as ``isError`` results, never a JSON-RPC error for a bad
argument). Results are kernos's exact text as ``content``, with no ``structuredContent``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import ipaddress
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from importlib import resources
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from kernos._app import TOOLSETS, SharedMcpServers, ToolsetFactory
from kernos._app import agent_session as _agent_session
from kernos._serve_approve import HostApprover, hosted_call
from kernos._serve_resources import (
    TASK_MIME,
    TASK_TEMPLATE,
    task_id_of,
    task_text,
    task_title,
    task_uri,
    unknown_task_message,
)
from kernos.boundary import (
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    call_tool,
    clean_text,
    non_blank_text,
)
from kernos.runtime import (
    ConfigError,
    Runtime,
    Session,
    WorkspacePolicy,
    WorkspaceRefused,
    cancel_toolsets,
    scrub_result,
    shielded,
)

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.connection import Connection
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
    from starlette.types import ASGIApp, Receive, Scope, Send

    from kernos.tasks import TaskStore

log = logging.getLogger("kernos.serve")

#: ``--foreground-wait`` when not given: hosts cut a call at about 60 s.
DEFAULT_FOREGROUND_WAIT = 50.0

#: ``--session-idle`` when not given: an HTTP session without a request this long is closed
DEFAULT_SESSION_IDLE = 30 * 60.0

#: ``--max-sessions`` when not given: HTTP sessions open at once (past it: HTTP 503)
DEFAULT_MAX_SESSIONS = 64

#: the hosts ``--http`` accepts without a token (anything else needs ``--token-env``)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")

_STDIO = "stdio"
_STATELESS = "http"  # 2026-07-28 HTTP requests carry no session: they share one kernos session
_SESSION = "session:"  # + the SDK's id of an HTTP session it verified


def session_tag(session_id: str) -> str:
    """What logs show for an MCP session id: 8 hex characters of its SHA-256 (not reversible)."""
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()[:8]


def _shown(key: str) -> str:
    return f"http session {session_tag(key[len(_SESSION) :])}" if key.startswith(_SESSION) else key


# -- the seam: one agent session with all its tools -------------------------------------------


@asynccontextmanager
async def agent_session(
    runtime: Runtime,
    agent: str,
    *,
    toolsets: tuple[ToolsetFactory, ...] = TOOLSETS,
    on_mail: Callable[[Session, Callable[[], bool]], None] | None = None,
) -> AsyncIterator[Session]:
    """A session of ``agent`` with every tool ``kernos run`` gives it (task, output, configured
    and MCP tools); on exit its unfinished children are cancelled (recorded ``cancelled``, not
    ``lost``) and every attachment is closed, shielded from a cancellation meanwhile.

    The one place ``kernos mcp`` composes tools: :func:`kernos._app.agent_session`, as
    ``kernos run`` does (``toolsets``: the factories, e.g. drawing on shared MCP servers). The
    host is the lead of the teams it forms: the lead's team tools are there from the start, and
    ``on_mail`` is given the session and what claims its team mail onto its queue (see
    :meth:`KernosMcpServer.call`).
    """
    from kernos.tasks import TaskToolset

    async with _agent_session(
        runtime, agent, wait=False, toolsets=toolsets, without_model=True
    ) as (session, opened):
        for toolset in opened:
            if isinstance(toolset, TaskToolset):
                toolset.host_lead(session)
                if on_mail is not None:
                    on_mail(session, toolset.lead_mail)
        try:
            yield session
        finally:
            await shielded(cancel_toolsets(opened, "its MCP session ended"))


# -- a server without a usable model ----------------------------------------------------------

#: the ``usage_calls`` session and agent of the calls the MCP host itself makes
HOST_SESSION = "mcp"
HOST_AGENT = "mcp-host"

#: the served tools that need a model, and whose model: the agent's (``None``) or ``compress``'s
MODEL_TOOLS: dict[str, str | None] = {"task": None, "task_send": None, "compress": "compress"}


def model_config_error(tool: str, error: ConfigError) -> ToolResult:
    """The coded ``config_error`` a tool that needs the model answers when there is none."""
    if error.key == "default_model":
        what = "no model is configured"
        fix = (
            'add "KERNOS_MODEL": "<provider:model>" (and the provider\'s key, e.g. '
            '"OPENAI_API_KEY") to the `env` of the kernos server in your MCP host\'s config, or '
            "set default_model in kernos.toml"
        )
    else:
        what = error.problem
        fix = f'add "{error.key}" to the `env` of the kernos server in your MCP host\'s config'
        if error.file != "(config)":
            fix += f" (or fix {error.key} in {error.file})"
    return ToolResult.from_error(
        ToolError(
            "config_error",
            f"`{tool}` needs a model and this kernos server has none it can use: {what}. To fix "
            f"it, {fix}, then restart the server. The other tools work without it.",
            {"key": error.key},
        ),
        stage="semantic",
        tool=tool,
    )


# -- compress ----------------------------------------------------------------------------------


class CompressArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    path: str
    rounds: int = Field(default=3, ge=1, le=10)


def _prepare_compress(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    path = non_blank_text(raw.get("path"))
    if path is not None:
        out["path"] = path
    rounds = raw.get("rounds")
    if isinstance(rounds, int) or non_blank_text(rounds) is not None:
        out["rounds"] = rounds
    return out


def compress_description() -> str:
    """What the host's model reads about ``compress`` (``_serve_compress.md``)."""
    return resources.files("kernos").joinpath("_serve_compress.md").read_text("utf-8").strip()


def compress_tool(runtime: Runtime) -> ToolSpec[CompressArgs]:
    """``compress(path, rounds)``: the audited protocol on one workspace file, rewritten in place
    only when a draft is approved."""

    async def run(params: CompressArgs, ctx: ToolContext) -> ToolResult:
        from kernos.compress import Status, compress_files, tool_report

        try:
            policy = WorkspacePolicy.from_config(runtime.config)
            path = policy.resolve(params.path, what="compress path")
        except WorkspaceRefused as exc:
            raise ToolError("path_refused", str(exc)) from None
        model = runtime.model(runtime.model_name("compress"))
        (report,) = await compress_files(
            [path], model=model, rounds=params.rounds, in_place=True, store=runtime.store
        )
        return ToolResult(
            tool_report(report),
            {"report": report.to_json()},
            is_error=report.status is not Status.APPROVED,
        )

    return ToolSpec(
        name="compress",
        description=compress_description(),
        params=CompressArgs,
        execute=run,
        prepare=_prepare_compress,
        max_retries=runtime.config.retries,
    )


# -- the server ----------------------------------------------------------------------------------


#: seconds between looks at the subscribed tasks of a connection (their row and newest event)
WATCH_INTERVAL = 0.2


@dataclasses.dataclass
class _Watched:
    """Resource subscriptions: each URI with what its task looked like when last seen, how to
    say it changed (``notifications/resources/updated`` on a 2025-11-25 connection, an event of
    a 2026-07-28 ``subscriptions/listen`` stream) and the task that watches."""

    notify: Callable[[str], Awaitable[None]]
    uris: dict[str, tuple[Any, ...]]
    task: asyncio.Task[None] | None = None


@dataclasses.dataclass
class _Hosted:
    """One connection's session, kept open by a task of its own (anyio resources inside it must
    be entered and left in the same task)."""

    session: Session
    stop: asyncio.Event
    task: asyncio.Task[None]


class KernosMcpServer:
    """kernos's tools over MCP for one agent: a low-level SDK server plus the sessions of its
    connections.

    Args:
        runtime: config, models, store.
        agent: whose tools are served.
        foreground_wait: seconds a foreground ``task`` waits before answering "still running".
        progress_interval: seconds between progress notifications while a call runs (only when
            the request carried a progress token).
        open_session: the seam (default: :func:`agent_session` with the process's shared MCP
            servers).
    """

    def __init__(
        self,
        runtime: Runtime,
        agent: str = "main",
        *,
        foreground_wait: float = DEFAULT_FOREGROUND_WAIT,
        progress_interval: float | None = None,
        open_session: Callable[[Runtime, str], contextlib.AbstractAsyncContextManager[Session]]
        | None = None,
    ) -> None:
        from kernos import __version__

        self.runtime = runtime
        if runtime.approver is None:  # an asked call goes to the host's human (elicitation)
            runtime.approver = HostApprover()
        self.agent = agent
        self.foreground_wait = foreground_wait
        self.progress_interval = progress_interval or min(5.0, max(0.5, foreground_wait / 10))
        self.mcp_servers = SharedMcpServers(runtime.config)
        self._open_session = open_session or self._agent_session
        self._compress = compress_tool(runtime)
        self._hosted: dict[str, _Hosted] = {}
        self._opening: dict[str, asyncio.Future[_Hosted]] = {}
        self._hosts: set[asyncio.Task[None]] = set()
        self._watched: dict[str, _Watched] = {}
        #: what claims each session's team mail onto its queue, by session id
        self._lead_mail: dict[str, Callable[[], bool]] = {}
        from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

        #: 2026-07-28: resource updates reach the open subscriptions/listen streams through it
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus)
        self._task_store: TaskStore | None = None
        self.http_server: Any = None  # the uvicorn server while serve_http runs
        self.server = self._build(__version__)

    def _build(self, version: str) -> Server[Any]:
        import mcp_types
        from mcp.server.lowlevel import Server

        server: Server[Any] = Server(
            "kernos",
            version=version,
            instructions="kernos: sub-agent tasks on any model, output channels, audited "
            "compression; every call goes through kernos's tool-call boundary.",
            # no per-call schema lookup: kernos validates every call itself (padding first)
            get_tool_input_schema=lambda name: None,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            # each task of the connection's session is a resource (kernos._serve_resources)
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._subscriptions_listen,
        )
        # 2026-07-28 derives every listChanged flag from serving subscriptions/listen; kernos
        # sends resource updates only: declare exactly that
        server.add_request_handler("server/discover", mcp_types.RequestParams, self._discover)
        return server

    async def _discover(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.RequestParams | None
    ) -> mcp_types.DiscoverResult:
        import mcp_types
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        caps = self.server.get_capabilities(protocol_version=ctx.protocol_version)
        if caps.tools is not None:
            caps.tools.list_changed = False
        if caps.resources is not None:
            caps.resources.list_changed = False
        return mcp_types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=caps,
            instructions=self.server.instructions,
        )

    # -- sessions --------------------------------------------------------------------------
    def _agent_session(
        self, runtime: Runtime, agent: str
    ) -> contextlib.AbstractAsyncContextManager[Session]:
        return agent_session(
            runtime, agent, toolsets=self.mcp_servers.factories(), on_mail=self._on_mail
        )

    def _on_mail(self, session: Session, claim: Callable[[], bool]) -> None:
        self._lead_mail[session.session_id] = claim

    @property
    def open_sessions(self) -> int:
        """How many kernos sessions are open (one per connection that made a request)."""
        return len(self._hosted)

    async def session_for(self, key: str, connection: Connection | None = None) -> Session:
        """The kernos session of connection ``key``, opened on first use; when ``connection``
        (the SDK's) is given, the session closes when the SDK closes that connection."""
        hosted = self._hosted.get(key)
        if hosted is not None:
            return hosted.session
        opening = self._opening.get(key)
        if opening is None:
            opening = self._opening[key] = asyncio.get_running_loop().create_future()
            host = asyncio.get_running_loop().create_task(
                self._host(key, opening), name=f"kernos-mcp-{_shown(key)}"
            )
            self._hosts.add(host)
            host.add_done_callback(self._hosts.discard)
            if connection is not None:
                connection.exit_stack.push_async_callback(self.close_session, key)
        try:
            return (await asyncio.shield(opening)).session
        finally:
            if opening.done():
                self._opening.pop(key, None)

    async def _host(self, key: str, ready: asyncio.Future[_Hosted]) -> None:
        stop = asyncio.Event()
        task = asyncio.current_task()
        assert task is not None
        try:
            async with self._open_session(self.runtime, self.agent) as session:
                hosted = self._hosted[key] = _Hosted(session, stop, task)
                ready.set_result(hosted)
                log.info("mcp %s: opened session %s", _shown(key), session.session_id)
                await stop.wait()
                log.info("mcp %s: closing session %s", _shown(key), session.session_id)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            if not isinstance(exc, Exception):
                raise
        finally:
            hosted_now = self._hosted.pop(key, None)
            if hosted_now is not None:
                self._lead_mail.pop(hosted_now.session.session_id, None)
            self._unwatch(key)

    async def close_session(self, key: str) -> None:
        """Close connection ``key``'s session (its unfinished children are cancelled, its
        per-session MCP servers stopped); waits for that, unless the wait is cancelled (the
        closing goes on). Nothing happens when it has none."""
        opening = self._opening.get(key)
        if opening is not None:
            await asyncio.wait({opening})
        hosted = self._hosted.get(key)
        if hosted is None:
            return
        hosted.stop.set()
        await asyncio.wait({hosted.task})

    async def aclose(self) -> None:
        """Close every connection's session (unfinished children are cancelled, not lost), then
        stop the shared MCP servers."""
        self._listen.close()  # open subscriptions/listen streams end gracefully
        hosted = list(self._hosted.values())
        for item in hosted:
            item.stop.set()
        for item in hosted:
            await shielded(asyncio.gather(item.task, return_exceptions=True))
        await shielded(self.mcp_servers.aclose())

    def _key(self, ctx: ServerRequestContext[Any, Any]) -> tuple[str, Connection | None]:
        """Which kernos session a request belongs to: stdio's, an SDK-verified HTTP session's
        (with its connection, to close with it), or the shared stateless one. Never a header."""
        connection = _connection(ctx)
        if connection.session_id is not None:  # minted and checked by the SDK's session manager
            return _SESSION + connection.session_id, connection
        if getattr(ctx.request, "headers", None) is None:
            return _STDIO, None
        return _STATELESS, None

    # -- handlers --------------------------------------------------------------------------
    def tools(self, session: Session) -> list[ToolSpec[Any]]:
        """Everything served to the connection of ``session``."""
        specs = list(session.tools.values())
        if self._compress.name not in session.tools:
            specs.append(self._compress)
        return specs

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        import mcp_types

        session = await self.session_for(*self._key(ctx))
        return mcp_types.ListToolsResult(
            tools=[
                mcp_types.Tool(name=s.name, description=s.description, input_schema=s.schema())
                for s in sorted(self.tools(session), key=lambda spec: spec.name)
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        import mcp_types

        session = await self.session_for(*self._key(ctx))
        raw = ctx.params.get("arguments") if isinstance(ctx.params, Mapping) else None
        result = await self.call(session, params.name, raw, ctx)
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(text=result.text)], is_error=result.is_error
        )

    # -- resources: the connection's tasks -------------------------------------------------
    @property
    def task_store(self) -> TaskStore:
        """The task records, in the runtime's store."""
        if self._task_store is None:
            from kernos.tasks import TaskStore

            self._task_store = TaskStore(self.runtime.store)
        return self._task_store

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourcesResult:
        import mcp_types

        session = await self.session_for(*self._key(ctx))
        return mcp_types.ListResourcesResult(
            resources=[
                mcp_types.Resource(
                    uri=task_uri(row["id"]),
                    name=row["id"],
                    title=task_title(row),
                    description=row.get("summary") or row.get("label") or None,
                    mime_type=TASK_MIME,
                )
                for row in self.task_store.children(session.session_id)
            ]
        )

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourceTemplatesResult:
        import mcp_types

        return mcp_types.ListResourceTemplatesResult(
            resource_templates=[
                mcp_types.ResourceTemplate(
                    uri_template=TASK_TEMPLATE,
                    name="task",
                    title="A kernos task of this connection",
                    description="The task's status and transcript (what `kernos tasks show` "
                    "and `kernos tasks output` print).",
                    mime_type=TASK_MIME,
                )
            ]
        )

    def _own_task(self, session: Session, uri: str) -> dict[str, Any]:
        """The row of the task ``uri`` names, when it is a task of ``session``.

        Raises:
            MCPError: ``INVALID_PARAMS``, the URI names no task of this connection.
        """
        from mcp.shared.exceptions import MCPError
        from mcp_types import INVALID_PARAMS

        task_id = task_id_of(uri)
        row = self.task_store.get(task_id) if task_id is not None else None
        if row is None or row["parent_session"] != session.session_id:
            raise MCPError(INVALID_PARAMS, unknown_task_message(uri), {"uri": uri})
        return row

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult:
        import mcp_types

        session = await self.session_for(*self._key(ctx))
        row = self._own_task(session, params.uri)
        text = task_text(row, self.task_store.events(row["id"]))
        content = mcp_types.TextResourceContents(uri=params.uri, text=text, mime_type=TASK_MIME)
        return mcp_types.ReadResourceResult(contents=[content])

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.SubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        import mcp_types

        key, _ = self._key(ctx)
        session = await self.session_for(*self._key(ctx))
        row = self._own_task(session, params.uri)
        watched = self._watched.get(key)
        if watched is None:
            notify = _connection(ctx).send_resource_updated
            watched = self._watched[key] = _Watched(notify, {})
        watched.uris[params.uri] = self._looks(row)
        if watched.task is None or watched.task.done():
            watched.task = asyncio.get_running_loop().create_task(
                self._watch(watched), name=f"kernos-mcp-watch-{_shown(key)}"
            )
        return mcp_types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.UnsubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        import mcp_types

        key, _ = self._key(ctx)
        watched = self._watched.get(key)
        if watched is not None:
            watched.uris.pop(params.uri, None)
            if not watched.uris:
                self._unwatch(key)
        return mcp_types.EmptyResult()

    def _looks(self, row: dict[str, Any] | None) -> tuple[Any, ...]:
        """What a task looks like to its readers: its row's last change and newest event."""
        if row is None:
            return ()
        return (row["status"], row["updated_at"], self.task_store.last_seq(row["id"]))

    async def _watch(self, watched: _Watched) -> None:
        """Send ``notifications/resources/updated`` for each subscribed task that changed, until
        the connection's session closes or nothing is subscribed."""
        while watched.uris:
            await asyncio.sleep(WATCH_INTERVAL)
            for uri, seen in list(watched.uris.items()):
                task_id = task_id_of(uri)
                now = self._looks(self.task_store.get(task_id) if task_id else None)
                if now == seen or uri not in watched.uris:
                    continue
                watched.uris[uri] = now
                try:
                    await watched.notify(uri)
                except Exception as exc:  # the host went away: its session closes on its own
                    log.info("mcp: resource update for %s not delivered: %s", uri, exc)
                    return

    async def _subscriptions_listen(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: mcp_types.SubscriptionsListenRequestParams,
    ) -> mcp_types.SubscriptionsListenResult:
        """A 2026-07-28 ``subscriptions/listen`` stream (the SDK's handler): while it is open,
        each of its resource URIs that names a task of this session is watched, and a change is
        an event on it."""
        from mcp.server.subscriptions import ResourceUpdated
        from mcp.shared.exceptions import MCPError

        async def publish(uri: str) -> None:
            await self._bus.publish(ResourceUpdated(uri=uri))

        session = await self.session_for(*self._key(ctx))
        watched = _Watched(publish, {})
        for uri in params.notifications.resource_subscriptions or ():
            with contextlib.suppress(MCPError):  # another's task, or none: never fires
                watched.uris[uri] = self._looks(self._own_task(session, uri))
        if watched.uris:
            watched.task = asyncio.get_running_loop().create_task(self._watch(watched))
        try:
            return await self._listen(ctx, params)
        finally:
            if watched.task is not None:
                watched.task.cancel()

    def _unwatch(self, key: str) -> None:
        watched = self._watched.pop(key, None)
        if watched is not None and watched.task is not None:
            watched.task.cancel()

    async def call(
        self,
        session: Session,
        name: str,
        raw: Any,
        ctx: ServerRequestContext[Any, Any] | None = None,
    ) -> ToolResult:
        """One call through the boundary, as the host sent it; the connection's pending
        completion notices and team mail (the host is its teams' lead) are appended to its text."""
        from kernos.tasks import FOREGROUND_WAIT

        spec = {s.name: s for s in self.tools(session)}.get(name)
        unusable = self.model_error(name) if spec is not None else None
        checked = unusable is None  # the boundary (or the unknown-name rule) judged the call
        if unusable is not None:
            result = model_config_error(name, unusable)
        elif spec is None:
            result = ToolResult(
                f"There is no tool `{name}` on this kernos server; list the tools and call "
                "one of them.",
                {"code": "unknown_tool", "stage": "schema", "tool": name},
                is_error=True,
            )
        else:
            context = ToolContext(
                agent=session.agent,
                session_id=session.session_id,
                tool_call_id=str(ctx.request_id) if ctx is not None else None,
                extras={"session": session, FOREGROUND_WAIT: self.foreground_wait},
                store=self.runtime.store,  # an asked call's answer is kept there
            )
            with hosted_call(ctx):  # an asked call may elicit from this host (_serve_approve.py)
                work = call_tool(spec, raw, context)
                result = await (self._with_progress(work, ctx) if _has_token(ctx) else work)
        if (text := clean_text(result.text)) is not result.text:
            result = dataclasses.replace(result, text=text)
        claim_mail = self._lead_mail.get(session.session_id)
        if claim_mail is not None:  # team mail for the host (the lead) rides along as a notice
            claim_mail()
        notices = session.take_queued()
        if notices:
            result = dataclasses.replace(result, text=f"{result.text}\n\n{notices}")
        result = scrub_result(result)  # its receipt too: what is logged and counted below
        if checked:
            self._receipt(name, result)
        return result

    def _receipt(self, name: str, result: ToolResult) -> None:
        """A host's call the boundary repaired: one ``kernos.log`` line (the receipt ``kernos -v
        run`` shows); repaired or rejected with a coded error: a ``usage_calls`` row (session
        ``mcp``, agent ``mcp-host``, no model: the host's is unknown) for ``kernos usage``."""
        from kernos.runtime import record_call

        if result.repairs:
            from kernos.boundary import describe_repairs

            log.info("mcp host call: %s", describe_repairs(name, result.repairs))
        record_call(self.runtime.store, HOST_SESSION, HOST_AGENT, None, name, result)

    def model_error(self, tool: str) -> ConfigError | None:
        """Why tool ``tool`` cannot have its model (None: it can, or needs none)."""
        if tool not in MODEL_TOOLS:
            return None
        agent = MODEL_TOOLS[tool] or self.agent
        try:
            self.runtime.model(self.runtime.model_name(agent))
        except ConfigError as exc:
            return exc
        return None

    async def _with_progress(
        self, work: Awaitable[ToolResult], ctx: ServerRequestContext[Any, Any] | None
    ) -> ToolResult:
        assert ctx is not None
        job = asyncio.ensure_future(work)
        started = time.monotonic()
        try:
            while True:
                done, _ = await asyncio.wait({job}, timeout=self.progress_interval)
                if done:
                    return job.result()
                elapsed = time.monotonic() - started
                with contextlib.suppress(Exception):  # a progress the host cannot take is no error
                    await ctx.session.report_progress(
                        round(elapsed, 1), None, f"still working ({elapsed:.0f} s)"
                    )
        finally:
            if not job.done():
                job.cancel()  # the request was cancelled: the tool's own cleanup runs in it
                await asyncio.gather(job, return_exceptions=True)

    # -- transports ------------------------------------------------------------------------
    async def serve_stdio(self) -> None:
        """Serve one host over stdin/stdout until it closes stdin."""
        from mcp.server.stdio import stdio_server

        try:
            async with stdio_server() as (read, write):
                await self.session_for(_STDIO)  # config errors surface before the first request
                await self.server.run(read, write, self.server.create_initialization_options())
        finally:
            await self.aclose()

    def http_app(
        self,
        host: str,
        port: int,
        token: str | None,
        *,
        session_idle: float | None = DEFAULT_SESSION_IDLE,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> ASGIApp:
        """The Streamable HTTP app at ``/mcp``: DNS-rebinding protection on, a bearer token
        checked on every request when ``token`` is set, sessions closed after ``session_idle``
        seconds without a request (``None``: never) and at most ``max_sessions`` open (HTTP 503
        past it)."""
        from mcp.server.transport_security import TransportSecuritySettings

        hosts = {host, *(LOOPBACK_NAMES if is_loopback(host) else ())}
        shown = [f"[{h}]" if ":" in h else h for h in hosts]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{h}:{port}" for h in shown] + [f"{h}:*" for h in shown],
            allowed_origins=[f"http://{h}:{port}" for h in shown]
            + [f"http://{h}:*" for h in shown],
        )
        _hide_session_ids()
        app = self.server.streamable_http_app(
            streamable_http_path="/mcp",
            transport_security=security,
            host=host,
            session_idle_timeout=session_idle,
            max_sessions=max_sessions,
        )
        return BearerToken(app, token) if token else app

    async def serve_http(
        self,
        host: str,
        port: int,
        token: str | None,
        *,
        session_idle: float | None = DEFAULT_SESSION_IDLE,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        """Serve Streamable HTTP until cancelled (see :meth:`http_app`)."""
        import uvicorn

        config = uvicorn.Config(
            self.http_app(host, port, token, session_idle=session_idle, max_sessions=max_sessions),
            host=host,
            port=port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        # kernos owns the signals (run_until_signal); uvicorn would re-raise them after shutdown
        server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        self.http_server = server
        job = asyncio.ensure_future(server.serve())
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            server.should_exit = True  # a graceful stop: open streams end, then the lifespan
            await shielded(asyncio.gather(job, return_exceptions=True))
            raise
        finally:
            await self.aclose()


def _connection(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The SDK's per-client :class:`~mcp.server.connection.Connection` of a request: its
    ``session_id`` (set by the session manager, ``None`` on stdio and 2026-07-28 HTTP) and its
    ``exit_stack`` (unwound when the SDK closes the session). mcp 2.3 hands low-level handlers a
    ``ServerRequestContext`` that does not expose it (``mcp/server/context.py``: ``Context`` with
    ``.connection`` is "not currently constructed"); its ``ServerSession`` holds it. The one
    place kernos reads an SDK private."""
    return ctx.session._connection


#: SDK ids (``uuid4().hex``), and whatever follows "session ID:" in the SDK's own log lines
_SESSION_IDS = re.compile(r"\b[0-9a-fA-F]{32}\b|(?<=session ID: )\S+", re.IGNORECASE)


def hide_session_ids(text: str) -> str:
    """``text`` with every MCP session id replaced by its :func:`session_tag`."""
    return _SESSION_IDS.sub(lambda m: f"<session {session_tag(m.group())}>", text)


class _HideSessionIds(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = hide_session_ids(message)
        if hidden != message:
            record.msg, record.args = hidden, None
        return True


def _hide_session_ids() -> None:
    """The SDK's HTTP transport logs session ids (a warning reaches stderr): tag them instead."""
    for name in ("mcp.server.streamable_http_manager", "mcp.server.streamable_http"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _HideSessionIds) for f in logger.filters):
            logger.addFilter(_HideSessionIds())


def _has_token(ctx: ServerRequestContext[Any, Any] | None) -> bool:
    meta = ctx.meta if ctx is not None else None
    return bool(meta) and (
        meta.get("progressToken") is not None or meta.get("progress_token") is not None  # type: ignore[union-attr]
    )


def is_loopback(host: str) -> bool:
    """``host`` names this machine only (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BearerToken:
    """Refuses every HTTP request without ``Authorization: Bearer <token>`` (401)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                from starlette.responses import PlainTextResponse

                response = PlainTextResponse(
                    "missing or wrong bearer token: send Authorization: Bearer <token>",
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as ``(host, port)``.

    Raises:
        ValueError: not HOST:PORT, or a port outside 1-65535 (0 is allowed: any free port).
    """
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--http {value!r} is not HOST:PORT; pass e.g. 127.0.0.1:8765")
    return host, int(port)
