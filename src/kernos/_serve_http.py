"""``kernos mcp``'s transports: stdio and Streamable HTTP (bearer token, loopback hosts, session
ids kept out of the logs)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import logging
import re
from typing import TYPE_CHECKING, Any

from kernos.runtime import (
    Session,
    shielded,
)

if TYPE_CHECKING:
    from mcp.server.connection import Connection
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
    from starlette.types import ASGIApp, Receive, Scope, Send


#: ``--session-idle`` when not given: an HTTP session without a request this long is closed
DEFAULT_SESSION_IDLE = 30 * 60.0

#: ``--max-sessions`` when not given: HTTP sessions open at once (past it: HTTP 503)
DEFAULT_MAX_SESSIONS = 64

#: the hosts ``--http`` accepts without a token (anything else needs ``--token-env``)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")

_STDIO = "stdio"
_SESSION = "session:"  # + the SDK's id of an HTTP session it verified


def session_tag(session_id: str) -> str:
    """What logs show for an MCP session id: 8 hex characters of its SHA-256 (not reversible)."""
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()[:8]


def _shown(key: str) -> str:
    return f"http session {session_tag(key[len(_SESSION) :])}" if key.startswith(_SESSION) else key


class _Transports:
    """The server's transports (a part of :class:`kernos._serve.KernosMcpServer`)."""

    server: Server[Any]
    http_server: Any

    if TYPE_CHECKING:

        async def session_for(self, key: str, connection: Connection | None = None) -> Session: ...
        async def aclose(self) -> None: ...

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
