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
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from kernos._app import TOOLSETS, SharedMcpServers, ToolsetFactory
from kernos._app import agent_session as _agent_session
from kernos._serve_approve import HostApprover, hosted_call
from kernos.boundary import (
    ToolContext,
    ToolResult,
    ToolSpec,
    call_tool,
    clean_text,
)
from kernos.runtime import (
    ConfigError,
    Runtime,
    Session,
    cancel_toolsets,
    scrub_result,
    shielded,
)

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.connection import Connection
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server

    from kernos.tasks import TaskStore
from kernos._serve_http import _SESSION, _STDIO, _connection, _has_token, _shown, _Transports
from kernos._serve_http import DEFAULT_MAX_SESSIONS as DEFAULT_MAX_SESSIONS
from kernos._serve_http import DEFAULT_SESSION_IDLE as DEFAULT_SESSION_IDLE
from kernos._serve_http import LOOPBACK_NAMES as LOOPBACK_NAMES
from kernos._serve_http import BearerToken as BearerToken
from kernos._serve_http import hide_session_ids as hide_session_ids
from kernos._serve_http import is_loopback as is_loopback
from kernos._serve_http import parse_http as parse_http
from kernos._serve_http import session_tag as session_tag
from kernos._serve_tools import HOST_AGENT, HOST_SESSION, compress_tool
from kernos._serve_tools import MODEL_TOOLS as MODEL_TOOLS
from kernos._serve_tools import CompressArgs as CompressArgs
from kernos._serve_tools import compress_description as compress_description
from kernos._serve_tools import model_config_error as model_config_error
from kernos._serve_watch import _Subscriptions, _Watched

log = logging.getLogger("kernos.serve")

#: ``--foreground-wait`` when not given: hosts cut a call at about 60 s.
DEFAULT_FOREGROUND_WAIT = 50.0

_STATELESS = "http"  # 2026-07-28 HTTP requests carry no session: they share one kernos session


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


# -- the server ----------------------------------------------------------------------------------


@dataclasses.dataclass
class _Hosted:
    """One connection's session, kept open by a task of its own (anyio resources inside it must
    be entered and left in the same task)."""

    session: Session
    stop: asyncio.Event
    task: asyncio.Task[None]


class KernosMcpServer(_Subscriptions, _Transports):
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
