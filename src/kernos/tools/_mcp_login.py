"""``kernos mcp login`` / ``logout`` / ``status``: a person logs kernos in to an OAuth MCP server.

The login is the SDK's flow (:class:`kernos.tools._mcp_auth.KernosOAuth`) with the two handlers
only a person can answer: the authorization URL is shown (and opened in a browser when there is a
display), and the redirect is received on a loopback port (:class:`LoopbackCallback`). The login is
checked the way a run uses it: by listing the server's tools.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import webbrowser
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mcp.client.auth import OAuthFlowError
from mcp.shared.auth import AuthorizationCodeResult

from kernos.errors import ConfigError, McpLoginNeeded, McpServerError
from kernos.runtime import Config, McpServerConfig
from kernos.tools._mcp import McpToolset
from kernos.tools._mcp_auth import KernosOAuth, TokenFile, configured_client, token_path

#: how long a login waits for the person to finish in the browser, in seconds
LOGIN_WAIT = 600.0
_CALLBACK_PATH = "/callback"
_PAGE = (
    "<!doctype html><title>kernos</title><p>kernos received the login for [{server}]; "
    "you can close this tab.</p>"
)


class LoopbackCallback:
    """A one-shot HTTP server on 127.0.0.1 that receives the authorization redirect.

    Args:
        server: the ``[mcp.NAME]`` name (shown on the page).
        port: the port to listen on; 0: any free one.

    Raises:
        OSError: the port cannot be bound.
    """

    def __init__(self, server: str, port: int = 0) -> None:
        self._loop = asyncio.get_running_loop()
        self._result: asyncio.Future[AuthorizationCodeResult] = self._loop.create_future()
        page = _PAGE.format(server=server).encode()
        deliver = self._deliver

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != _CALLBACK_PATH:
                    self.send_error(404)
                    return
                deliver(parse_qs(parts.query))
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the query carries the code: never printed

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}{_CALLBACK_PATH}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="kernos-oauth-callback", daemon=True
        )
        self._thread.start()

    def _deliver(self, query: dict[str, list[str]]) -> None:
        def first(name: str) -> str | None:
            values = query.get(name)
            return values[0] if values else None

        def settle() -> None:
            if self._result.done():
                return
            error = first("error")
            if error is not None or first("code") is None:
                why = first("error_description") or error or "no authorization code"
                self._result.set_exception(OAuthFlowError(f"the authorization was refused: {why}"))
                return
            self._result.set_result(
                AuthorizationCodeResult(
                    code=first("code") or "", state=first("state"), iss=first("iss")
                )
            )

        self._loop.call_soon_threadsafe(settle)

    async def wait(self) -> AuthorizationCodeResult:
        """The redirect's code and state, once the person has finished."""
        return await self._result

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def has_display() -> bool:
    """Whether a browser can be opened here (a desktop session, or macOS / Windows)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def oauth_server(config: Config, server: str) -> McpServerConfig:
    """``[mcp.SERVER]``, which must say ``auth = "oauth"``, or be a ``url`` server with no
    ``auth`` key (whose 401 may ask for a login: the flow discovers it).

    Raises:
        ConfigError: no such server, or it cannot use OAuth (a ``command`` server).
    """
    found = config.mcp.get(server)
    if found is None:
        known = ", ".join(sorted(config.mcp)) or "none"
        raise ConfigError(
            config.path,
            f"mcp.{server}",
            f"no such MCP server (configured: {known})",
            "name one of the [mcp.NAME] tables of kernos.toml",
        )
    if found.auth != "oauth" and found.url is None:
        raise ConfigError(
            config.path,
            f"mcp.{server}",
            "is a command server, which has no OAuth login",
            "log in to servers with a url (Streamable HTTP) only",
        )
    return found


def _stored_port(store: TokenFile) -> int:
    """The loopback port the stored dynamic registration was made for (0: none)."""
    client = store.read().get("client")
    uris = client.get("redirect_uris") if isinstance(client, dict) else None
    if not uris or not isinstance(uris[0], str):
        return 0
    parts = urlsplit(uris[0])
    return parts.port or 0 if parts.hostname == "127.0.0.1" else 0


async def mcp_login(
    config: Config,
    server: str,
    *,
    show: Callable[[str], None],
    open_browser: bool | None = None,
) -> list[str]:
    """Log in to ``[mcp.SERVER]`` and store its tokens; the server's tool names, listed with them.

    Args:
        config: the loaded config.
        server: the ``[mcp.NAME]`` name.
        show: how the authorization URL reaches the person (a line on stderr).
        open_browser: open the URL in a browser; None: when there is a display.

    Raises:
        ConfigError: no such server, or not an OAuth one.
        McpServerError: the login or the listing failed (the reason in one line).
    """
    settings = oauth_server(config, server)
    assert settings.url is not None
    store = TokenFile(token_path(config.home, server), settings.url)
    # a dynamic registration names its redirect URI: reuse its port, or register again
    port = _stored_port(store) if settings.client_id is None else 0
    try:
        callback = LoopbackCallback(server, port)
    except OSError:
        store.forget_client()
        callback = LoopbackCallback(server, 0)
    if port and callback.port != port:
        store.forget_client()
    store.client = configured_client(settings, callback.url, config.path, server)
    browse = has_display() if open_browser is None else open_browser

    async def redirect(url: str) -> None:
        show(url)
        if browse:
            await asyncio.to_thread(webbrowser.open, url)

    oauth = KernosOAuth(
        server,
        settings,
        store,
        config_file=config.path,
        redirect_uri=callback.url,
        redirect_handler=redirect,
        callback_handler=callback.wait,
    )
    # a login starts from no tokens: the flow then always asks the person
    store.forget_tokens()
    # the person may take minutes in the browser: the start timeout covers that wait too
    waiting = settings.model_copy(update={"timeout": max(settings.timeout, LOGIN_WAIT)})
    toolset = McpToolset(server, waiting, config_file=config.path, home=config.home, oauth=oauth)
    try:
        async with toolset:
            specs = await toolset.tools()
    finally:
        callback.close()
    if store.tokens() is None:
        raise McpServerError(
            config.path,
            f"mcp.{server}",
            "the server listed its tools without asking for a login, so no tokens were stored",
            'it needs none: use it as it is (and remove auth = "oauth" from its table if set)',
        )
    return [spec.name for spec in specs]


def mcp_logout(config: Config, server: str) -> bool:
    """Forget ``[mcp.SERVER]``'s tokens and registered client; whether any were stored.

    Raises:
        ConfigError: no such server, or not an OAuth one.
    """
    settings = oauth_server(config, server)
    assert settings.url is not None
    return TokenFile(token_path(config.home, server), settings.url).clear()


@dataclass
class McpServerStatus:
    """One configured server as ``kernos mcp status`` reports it."""

    server: str
    #: ``connected``, ``needs_login`` or ``failed``
    state: str
    tools: int = 0
    reason: str = ""
    fix: str = ""

    @property
    def usable(self) -> bool:
        return self.state == "connected"

    def data(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "state": self.state,
            "tools": self.tools,
            "reason": self.reason or None,
            "fix": self.fix or None,
        }

    def line(self) -> str:
        if self.state == "connected":
            return f"{self.server}: connected ({self.tools} tools)"
        if self.state == "needs_login":
            return f"{self.server}: needs login ({self.reason}): {self.fix}"
        return f"{self.server}: failed: {self.reason}"


def server_status(server: str, outcome: Sequence[Any] | BaseException) -> McpServerStatus:
    """A server's status from what listing its tools gave (the tools, or the error). Pure."""
    if isinstance(outcome, McpLoginNeeded):
        return McpServerStatus(server, "needs_login", reason=outcome.problem, fix=outcome.fix)
    if isinstance(outcome, ConfigError):
        return McpServerStatus(server, "failed", reason=outcome.problem, fix=outcome.fix)
    if isinstance(outcome, BaseException):
        return McpServerStatus(server, "failed", reason=f"{type(outcome).__name__}: {outcome}")
    return McpServerStatus(server, "connected", tools=len(outcome))


async def mcp_status(config: Config) -> list[McpServerStatus]:
    """Every configured server, started the way a run starts it (no person asked), in config
    order."""

    async def one(name: str, settings: McpServerConfig) -> McpServerStatus:
        toolset = McpToolset(name, settings, config_file=config.path, home=config.home)
        outcome: Sequence[Any] | BaseException
        try:
            async with toolset:
                outcome = await toolset.tools()
        except (McpServerError, ConfigError) as exc:
            outcome = exc
        return server_status(name, outcome)

    return list(await asyncio.gather(*(one(n, s) for n, s in config.mcp.items())))
