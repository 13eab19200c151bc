"""MCP servers as sources of tools, through the official ``mcp`` SDK.

Each ``[mcp.NAME]`` server becomes one :class:`McpToolset`. Its connection lives in one background
task per process (the SDK's transports are anyio context managers and must be entered and left in
the same task); the parent session and every child that is granted a tool share it. The server
starts on the first :meth:`McpToolset.tools` and stops on ``__aexit__`` / :meth:`aclose`, or when
the event loop ends. A stdio server runs in its own process group and reads EOF on its stdin when
kernos dies, so it cannot outlive a killed kernos.

Every MCP tool is a :func:`kernos.boundary.schema_tool`: padding is normalized by the prepare
derived from its input schema, and the arguments are validated with ``jsonschema`` before any
request reaches the server.

What a server sends is bounded (:mod:`kernos.tools._limits`): a tool whose input schema is too big
or too deep is left out with one warning; a result's text is cut at ``max_result_bytes`` before
the model or the store sees it; lines a stdio server writes on stdout that are not MCP messages are
counted and summarised in one warning, not logged one by one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fnmatch
import logging
import math
import re
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import IO, Any

import anyio
import httpx2
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client.streamable_http import streamable_http_client

from kernos.boundary import ToolContext, ToolResult, ToolSpec, schema_tool
from kernos.errors import McpServerError as McpServerError
from kernos.runtime import (
    KERNOS_SOURCE,
    Config,
    ConfigError,
    McpServerConfig,
    delimited,
    from_source,
    kernos_home,
)
from kernos.tools._elicit import nobody_asked_note
from kernos.tools._limits import schema_problem
from kernos.tools._mcp_auth import (
    KernosOAuth,
    challenge_refusal,
    login_refusal,
    oauth_challenge,
    run_auth,
    uses_oauth,
)
from kernos.tools._mcp_noise import _NOISE, _NOISE_FILTER, _StdoutNoise, _warn
from kernos.tools._mcp_results import _leaf, _reason, _tool_result
from kernos.tools._select import select_mcp_tools

log = logging.getLogger("kernos.mcp")

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_STDERR_TAIL = 300


@dataclasses.dataclass
class _InFlight:
    """A call waiting for its server's answer: whose it is (an elicitation meanwhile is asked of
    that session's person, if it has one), its idle timeout (paused while a person answers) and
    the questions nobody could answer (the model is told)."""

    session_id: str | None
    idle: anyio.CancelScope
    resume: Any  # () -> None: restart the idle timeout from now
    unanswered: list[str] = dataclasses.field(default_factory=list)


def mcp_tool_name(server: str, tool: str) -> str:
    """The name a model calls an MCP tool by: ``<server>__<tool>``, sanitized to
    ``^[A-Za-z0-9_-]{1,64}$`` (other characters become ``_``; cut at 64)."""
    return f"{server}__{_UNSAFE.sub('_', tool) or '_'}"[:64]


class McpToolset:
    """The tools of one MCP server, each offered as ``<server>__<tool>``.

    Args:
        server: the ``[mcp.NAME]`` name.
        config: the server's configuration.
        config_file: the config file (errors name it; a relative ``cwd`` is read from its folder).
    """

    def __init__(
        self,
        server: str,
        config: McpServerConfig,
        *,
        config_file: Path | None = None,
        home: Path | None = None,
        oauth: KernosOAuth | None = None,
    ) -> None:
        self.server = server
        # auth = "oauth": the tokens are under ``home`` (the state directory); ``oauth`` is the
        # provider of a login under way (:mod:`kernos.tools._mcp_login`), else a run's is made
        self.home = home
        self.oauth = oauth
        self.name = f"mcp:{server}"
        self.config = config
        self.config_file = config_file
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._session: ClientSession | None = None
        self._listed: list[mcp_types.Tool] = []
        self._specs: list[ToolSpec[Any]] | None = None
        self._failure: McpServerError | None = None
        self._stderr: IO[bytes] | None = None
        self._http_refusal = ""
        #: the resource metadata URL of a 401's OAuth challenge (mcp_auth.oauth_challenge)
        self._challenge: str | None = None
        self._noise = _StdoutNoise(server)
        self._calls: dict[int, _InFlight] = {}

    # -- the Toolset contract -------------------------------------------------------------------
    async def __aenter__(self) -> McpToolset:
        return self  # the server starts on first use

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def tools(self, session: Any = None) -> Sequence[ToolSpec[Any]]:
        """Every tool the server offers (after ``include``/``exclude``); starts it on first use.

        Raises:
            McpServerError: the server did not start, or two of its tools get the same name.
        """
        async with self._lock:
            if self._specs is None:
                await self._start()
                self._specs = self._build_specs()
            return list(self._specs)

    def outstanding(self) -> bool:
        return False

    async def wait_change(self) -> None:
        await asyncio.Event().wait()

    async def aclose(self, *, wait: bool = True) -> None:
        """Stop the server (what leaving ``async with`` does)."""
        await self.stop()

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._session is not None and self._task is not None and not self._task.done()

    async def _start(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._task is None:
            self._task = asyncio.create_task(self._serve(), name=f"kernos-mcp-{self.server}")
        await self._ready.wait()
        if self._failure is not None:
            raise self._failure

    async def stop(self) -> None:
        """Close the session and stop the server; never raises."""
        task, self._task = self._task, None
        self._stop.set()
        if task is not None and not self._ready.is_set():
            task.cancel()  # still starting: do not wait out the start timeout
        if task is not None:
            with contextlib.suppress(BaseException):
                await task
        self._session = None
        self._noise.report()
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                self._stderr.close()
            self._stderr = None

    async def _serve(self) -> None:
        _NOISE.set(self._noise)  # this task's context: the SDK's reader tasks inherit it
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._connect(stack)
                session = await stack.enter_async_context(
                    ClientSession(read, write, elicitation_callback=self._on_elicit)
                )
                with anyio.fail_after(self.config.timeout):
                    await session.initialize()
                    self._listed = await _list_all_tools(session)
                self._session = session
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            if not self._ready.is_set():
                self._failure = self._start_error(exc)
            elif not self._stop.is_set():
                log.warning("MCP server [%s] stopped: %s", self.server, _reason(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._session = None
            self._ready.set()

    async def _connect(self, stack: AsyncExitStack) -> Any:
        config = self.config
        if config.command is not None:
            self._stderr = tempfile.TemporaryFile(mode="a+b")  # noqa: SIM115 (closed in stop())
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=self._cwd(),
            )
            errlog: Any = self._stderr
            stdio_log = logging.getLogger(stdio_client.__module__)
            if _NOISE_FILTER not in stdio_log.filters:
                stdio_log.addFilter(_NOISE_FILTER)
            return await stack.enter_async_context(stdio_client(params, errlog=errlog))
        assert config.url is not None

        async def note_refusal(response: httpx2.Response) -> None:
            # the SDK turns an HTTP error into a generic JSON-RPC error; keep the status for
            # the one line a person reads when the server does not start
            if response.status_code >= 400:
                url = response.request.url.copy_with(query=None, fragment=None)
                self._http_refusal = f"HTTP {response.status_code} from {url}"
                header = response.headers.get("www-authenticate")
                self._challenge = oauth_challenge(response.status_code, header)

        home = self.home or kernos_home()
        if self.oauth is None and uses_oauth(self.server, config, home):
            self.oauth = run_auth(self.server, config, home, config_file=self.config_file)
        http = httpx2.AsyncClient(
            auth=self.oauth,
            headers=dict(config.headers),
            timeout=httpx2.Timeout(config.timeout, read=max(300.0, config.timeout)),
            event_hooks={"response": [note_refusal]},
        )
        await stack.enter_async_context(http)
        return await stack.enter_async_context(streamable_http_client(config.url, http_client=http))

    def _cwd(self) -> str | None:
        if self.config.cwd is None:
            return None
        path = Path(self.config.cwd).expanduser()
        if not path.is_absolute() and self.config_file is not None:
            path = self.config_file.parent / path
        return str(path)

    def _start_error(self, exc: BaseException) -> McpServerError:
        exc = _leaf(exc)
        if isinstance(exc, McpServerError):
            return exc  # a login kernos will not wait for (run_auth), already one line
        if self.oauth is not None and self.oauth.refused is not None:
            return self.oauth.refused
        if self.oauth is None and self._challenge is not None:
            # no auth key, but the server asks for OAuth: a login it needs, not a bad url
            return challenge_refusal(self.server, self._challenge, self.config_file)
        reason = _reason(exc)
        if isinstance(exc, TimeoutError):
            reason = f"no answer to initialize within {self.config.timeout:g} s"
        elif self._http_refusal:
            reason = f"{self._http_refusal}: {reason}"
        tail = self._stderr_tail()
        problem = f"the server did not start ({reason})"
        if self.config.command is not None and not isinstance(exc, OSError):
            problem += f"; its stderr ended: {tail}" if tail else "; it wrote nothing on stderr"
        what = "command and args" if self.config.command is not None else "url and headers"
        return McpServerError(
            self.config_file,
            f"mcp.{self.server}",
            problem,
            f"check its {what}, or run it by hand to see why",
        )

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, 2)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - 2000))
            text = self._stderr.read().decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        tail = " | ".join(lines)
        return tail if len(tail) <= _STDERR_TAIL else "..." + tail[-_STDERR_TAIL:]

    # -- tools ----------------------------------------------------------------------------------
    def _selected(self, name: str) -> bool:
        include, exclude = self.config.include, self.config.exclude
        if include and not any(fnmatch.fnmatchcase(name, glob) for glob in include):
            return False
        return not any(fnmatch.fnmatchcase(name, glob) for glob in exclude)

    def _build_specs(self) -> list[ToolSpec[Any]]:
        specs: list[ToolSpec[Any]] = []
        owners: dict[str, str] = {}
        for tool in self._listed:
            if not self._selected(tool.name):
                continue
            offered = mcp_tool_name(self.server, tool.name)
            if offered in owners:
                raise McpServerError(
                    self.config_file,
                    f"mcp.{self.server}",
                    f"tools {owners[offered]!r} and {tool.name!r} would both be offered as "
                    f"{offered!r}",
                    f"leave one out with exclude = [{tool.name!r}]",
                )
            owners[offered] = tool.name
            problem = schema_problem(tool.input_schema)
            if problem is not None:
                _warn(
                    f"MCP server [{self.server}]: tool {tool.name!r} left out: {problem}; the "
                    f"model is not offered it (leave it out with exclude = [{tool.name!r}])"
                )
                continue
            specs.append(self._spec(offered, tool))
        return specs

    def _spec(self, offered: str, tool: mcp_types.Tool) -> ToolSpec[Any]:
        remote = tool.name
        schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
        if not schema:
            schema = {"type": "object", "properties": {}}

        async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return await self.call(remote, args, offered, ctx)

        description = tool.description or tool.title or f"{remote} (MCP server {self.server})"
        # what the server answers reaches the model delimited as data from `mcp:<server>`
        return from_source(schema_tool(offered, description, schema, execute), self.name)

    async def call(
        self,
        tool: str,
        args: dict[str, Any],
        offered: str | None = None,
        ctx: ToolContext | None = None,
    ) -> ToolResult:
        """Call ``tool`` (the server's own name) with arguments already prepared and validated.

        The call may take ``timeout`` seconds without a word from the server; each progress
        notification it sends restarts that wait (and is a ``progress`` event of the calling
        session: ``kernos run -v`` and the task transcript show it), up to ``max_timeout`` in
        all."""
        offered = offered or mcp_tool_name(self.server, tool)
        base = {"tool": offered, "server": self.server, "mcp_tool": tool}
        ours = {**base, "source": KERNOS_SOURCE}  # errors kernos writes are not the server's text
        refusal = login_refusal(self.oauth, offered, ours)  # a login kernos will not wait for
        if refusal is not None:
            return refusal
        session = self._session
        if session is None:
            return ToolResult(
                text=(
                    f"MCP server [{self.server}] is not running, so `{offered}` cannot be used in "
                    "this run; do the task without it."
                ),
                details={**ours, "code": "mcp_unavailable", "stage": "execute"},
                is_error=True,
            )
        timeout, limit = self.config.timeout, self.config.call_limit
        caller = ctx.session if ctx is not None else None
        result: mcp_types.CallToolResult | None = None
        with anyio.CancelScope() as idle:
            started = anyio.current_time()
            idle.deadline = started + timeout

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                idle.deadline = min(started + limit, anyio.current_time() + timeout)
                if caller is not None and hasattr(caller, "emit"):
                    caller.emit(
                        "progress",
                        name=offered,
                        call_id=ctx.tool_call_id if ctx is not None else None,
                        progress=progress,
                        total=total,
                        message=message,
                    )

            def resume() -> None:
                idle.deadline = min(started + limit, anyio.current_time() + timeout)

            flight = _InFlight(ctx.session_id if ctx is not None else None, idle, resume)
            self._calls[id(flight)] = flight
            try:
                result = await session.call_tool(
                    tool, args, read_timeout_seconds=limit, progress_callback=on_progress
                )
            except MCPError as exc:
                refusal = login_refusal(self.oauth, offered, ours)  # refused during this call
                if refusal is not None:
                    return refusal
                if exc.code != mcp_types.REQUEST_TIMEOUT:
                    closed = exc.code == mcp_types.CONNECTION_CLOSED
                    code = "mcp_unavailable" if closed else "mcp_error"
                    return ToolResult(
                        text=f"MCP server [{self.server}] refused `{offered}`: {exc.message}",
                        details={**ours, "code": code, "stage": "execute", "mcp_code": exc.code},
                        is_error=True,
                    )
                idle.cancel()  # the SDK's own bound: max_timeout in all
                idle.deadline = started + limit
            finally:
                self._calls.pop(id(flight), None)
        if result is None and idle.cancel_called:
            if idle.deadline >= started + limit:
                why = f"{limit:g} s (its max_timeout: progress keeps a call alive that long)"
            else:
                why = f"{timeout:g} s, nor any progress"
            return ToolResult(
                text=(
                    f"`{offered}` got no answer from MCP server [{self.server}] within {why}; "
                    "try again, or ask for less at once."
                ),
                details={**ours, "code": "mcp_timeout", "stage": "execute"},
                is_error=True,
            )
        if result is None:
            raise AssertionError("unreachable: no result and no timeout")
        answered = _tool_result(result, base, self.config.max_result_bytes)
        if not flight.unanswered:
            return answered
        # the server's text stays delimited as its data; kernos's note follows, outside it
        theirs = delimited(dataclasses.replace(answered, details={**base, "source": self.name}))
        note = nobody_asked_note(self.server, flight.unanswered)
        return dataclasses.replace(
            answered,
            text=f"{theirs.text}\n\n{note}",
            details={**answered.details, "source": KERNOS_SOURCE, "elicitation": "cancel"},
        )

    async def _on_elicit(self, context: Any, params: Any) -> mcp_types.ElicitResult:
        """The server asks the user something while a call runs: the person at this terminal
        answers when every call in flight is their session's (:mod:`kernos.tools._human`);
        otherwise nobody can, and the answer is ``cancel`` (not ``decline``: nobody said no)."""
        from kernos.tools._human import the_human

        calls = list(self._calls.values())
        human = the_human()
        if human is not None and calls and all(c.session_id == human.session_id for c in calls):
            for call in calls:  # a person thinking is not the server being silent
                call.idle.deadline = math.inf
            try:
                answer = await human.answer(self.server, params)
            finally:
                for call in calls:
                    call.resume()
            log.info(
                "MCP server [%s] asked the user; the answer: %s", self.server, answer["action"]
            )
            return mcp_types.ElicitResult(**answer)
        for call in calls:
            call.unanswered.append(str(getattr(params, "message", "") or ""))
        log.info("MCP server [%s] asked the user; nobody can answer here: cancel", self.server)
        return mcp_types.ElicitResult(action="cancel")


async def _list_all_tools(session: ClientSession) -> list[mcp_types.Tool]:
    listed: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _page in range(1000):  # a server that keeps paging forever must not hang kernos
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        listed.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return listed


class McpServers:
    """Every ``[mcp.NAME]`` server of a config, as one toolset (name ``mcp``).

    Servers start together on the first :meth:`tools` and stop together on exit; a server found
    in ``shared`` (by name) is used as it is and left running on exit: its owner stops it.
    """

    name = "mcp"

    def __init__(self, config: Config, *, shared: Mapping[str, McpToolset] | None = None) -> None:
        shared = shared or {}
        self.toolsets = [
            shared.get(name) or McpToolset(name, server, config_file=config.path, home=config.home)
            for name, server in config.mcp.items()
        ]
        self._owned = [t for t in self.toolsets if t.server not in shared]

    async def __aenter__(self) -> McpServers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def tools(self, session: Any = None) -> list[ToolSpec[Any]]:
        """The tools of every server, in config order.

        Raises:
            McpServerError: a server did not start (the first such, in config order).
        """
        listed = await asyncio.gather(
            *(toolset.tools(session) for toolset in self.toolsets), return_exceptions=True
        )
        specs: list[ToolSpec[Any]] = []
        for outcome in listed:
            if isinstance(outcome, BaseException):
                raise outcome
            specs.extend(outcome)
        return specs

    def outstanding(self) -> bool:
        return False

    async def wait_change(self) -> None:
        await asyncio.Event().wait()

    async def aclose(self, *, wait: bool = True) -> None:
        await asyncio.gather(*(toolset.stop() for toolset in self._owned))


class McpAgentToolset(McpServers):
    """The MCP servers as one session's toolset: the tools its agent's ``tools`` selects.

    Raises (from :meth:`tools`):
        ConfigError: a selected ``server__tool`` name or glob matches none of the servers' tools.
    """

    def __init__(self, config: Config, *, shared: Mapping[str, McpToolset] | None = None) -> None:
        super().__init__(config, shared=shared)
        self.config = config

    async def tools(self, session: Any = None) -> list[ToolSpec[Any]]:
        agent = getattr(session, "agent", "main")
        chosen, missing = select_mcp_tools(
            self.config.agent(agent).tools, await super().tools(session), self.config.mcp
        )
        if missing:
            raise ConfigError(
                self.config.path,
                f"agents.{agent}.tools",
                f"{', '.join(missing)} matches none of the MCP servers' tools",
                "run `kernos tools` to see what each server offers",
            )
        present = getattr(session, "tools", {})
        return [t for t in chosen if t.name not in present]
