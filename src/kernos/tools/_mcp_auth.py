"""OAuth for remote MCP servers (``[mcp.NAME] auth = "oauth"``), through the SDK's
:class:`mcp.client.auth.OAuthClientProvider`: discovery, PKCE, dynamic registration (or a
pre-registered client, or a client metadata URL) and refresh are the SDK's; kernos adds where the
tokens live and who may wait for a person.

- Tokens live per server in the state directory (``<home>/mcp-auth/NAME.json``), mode 0600,
  replaced atomically (a temporary file renamed over the old one), with the absolute time the
  access token expires: the SDK keeps expiry in memory only, so a later process would send an
  expired token instead of refreshing it first (:class:`KernosOAuth` restores it).
- Every token and client secret read or written joins the one scrubber
  (:func:`kernos.runtime.register_secrets`), so no log line, receipt or report shows one.
- A run never waits for a browser (:func:`run_auth`): no tokens → :class:`McpLoginNeeded` before
  any connection; a refresh that fails → the SDK asks for a person, and kernos answers with
  :class:`McpLoginNeeded` at once. Only ``kernos mcp login`` (:mod:`kernos.tools._mcp_login`)
  passes handlers that show a URL and receive the redirect.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, OAuthTokenError
from mcp.client.auth.utils import union_scopes
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import ValidationError

from kernos.boundary import ToolResult
from kernos.errors import ConfigError, McpLoginNeeded
from kernos.runtime import McpServerConfig, register_secrets

log = logging.getLogger("kernos.mcp")

AUTH_DIR = "mcp-auth"
#: the redirect URI a client is described with when no login is under way (a run or a status
#: check never receives a redirect; the SDK's client metadata needs one all the same)
_NO_REDIRECT = "http://127.0.0.1/callback"
_CLIENT_NAME = "kernos"


def token_path(home: Path, server: str) -> Path:
    """Where the tokens of ``[mcp.SERVER]`` are kept."""
    return home / AUTH_DIR / f"{server}.json"


class RefreshLock:
    """An exclusive ``flock`` on ``<token file>.lock``, held from reading the refresh token to
    writing the one the server answers with: many servers rotate refresh tokens and refuse a
    used one, so two processes (or two providers of one) must never both spend the same one.
    Taken in a thread (the event loop goes on while another process refreshes); releasing is
    idempotent."""

    def __init__(self, path: Path) -> None:
        self.path = path.with_name(path.name + ".lock")
        self._fd: int | None = None

    async def acquire(self) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class TokenFile:
    """The SDK's ``TokenStorage`` over one JSON file: tokens, their expiry and the registered
    client, for one server URL (a file written for another URL reads as empty).

    Args:
        path: the file (:func:`token_path`).
        url: the server's URL.
        client: a pre-registered client (``client_id``), returned instead of a stored one.
    """

    def __init__(
        self, path: Path, url: str, client: OAuthClientInformationFull | None = None
    ) -> None:
        self.path = path
        self.url = url
        self.client = client

    # -- the file --------------------------------------------------------------------------------
    def read(self) -> dict[str, Any]:
        """The stored record, ``{}`` when absent, unreadable or for another URL."""
        try:
            record = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(record, dict) or record.get("url") != self.url:
            return {}
        tokens = record.get("tokens")
        if isinstance(tokens, dict):
            register_secrets(tokens.get("access_token"), tokens.get("refresh_token"))
        client = record.get("client")
        if isinstance(client, dict):
            register_secrets(client.get("client_secret"))
        return record

    def _write(self, record: dict[str, Any]) -> None:
        record = {**record, "url": self.url}
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(record, out, indent=2)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def clear(self) -> bool:
        """Forget the tokens and the registered client; whether there was anything."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def tokens(self) -> OAuthToken | None:
        raw = self.read().get("tokens")
        try:
            return OAuthToken.model_validate(raw) if isinstance(raw, dict) else None
        except ValidationError:
            return None

    def expires_at(self) -> float | None:
        """When the stored access token expires (seconds since the epoch), None: not known."""
        value = self.read().get("expires_at")
        return float(value) if isinstance(value, int | float) else None

    def wanted_scopes(self) -> str | None:
        """The scopes a step-up asked for, which the next login asks for too (None: none)."""
        wanted = self.read().get("wanted_scopes")
        return " ".join(str(s) for s in wanted) if isinstance(wanted, list) and wanted else None

    def want_scopes(self, scopes: list[str]) -> None:
        record = self.read()
        if not record:
            return
        known = record.get("wanted_scopes")
        seen = known if isinstance(known, list) else []
        record["wanted_scopes"] = list(dict.fromkeys([*seen, *scopes]))
        self._write(record)

    def secret_method(self) -> str | None:
        """The token endpoint authentication the configured client's secret was last sent with."""
        method = self.read().get("secret_method")
        return method if isinstance(method, str) else None

    def remember_secret_method(self, method: str) -> None:
        record = self.read()
        if record.get("secret_method") != method:
            record["secret_method"] = method
            self._write(record)

    def forget_tokens(self) -> None:
        """Drop the tokens, keeping the registered client (a login starts so)."""
        record = self.read()
        if record.pop("tokens", None) is not None:
            record.pop("expires_at", None)
            self._write(record)

    def forget_client(self) -> None:
        """Drop a dynamically registered client (its redirect URI can no longer be served)."""
        record = self.read()
        if record.pop("client", None) is not None:
            self._write(record)

    # -- TokenStorage ----------------------------------------------------------------------------
    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        register_secrets(tokens.access_token, tokens.refresh_token)
        record = self.read()
        record["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        record["expires_at"] = time.time() + tokens.expires_in if tokens.expires_in else None
        self._write(record)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        if self.client is not None:
            return self.client
        raw = self.read().get("client")
        try:
            return OAuthClientInformationFull.model_validate(raw) if isinstance(raw, dict) else None
        except ValidationError:
            return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self.client is not None:
            return  # a configured client is the config's, not the file's
        register_secrets(client_info.client_secret)
        record = self.read()
        record["client"] = client_info.model_dump(mode="json", exclude_none=True)
        self._write(record)


def secret_method(supported: list[str] | None) -> str:
    """How a client with a secret authenticates at the token endpoint, given the
    ``token_endpoint_auth_methods_supported`` of the authorization server's metadata:
    ``client_secret_post`` when only that of the two is named, else ``client_secret_basic``
    (RFC 8414's default when the metadata names none). Pure."""
    if supported and "client_secret_basic" not in supported and "client_secret_post" in supported:
        return "client_secret_post"
    return "client_secret_basic"


def login_state(store: TokenFile, now: float) -> str | None:
    """Why a run cannot use the stored login (None: it can, perhaps after a refresh). Pure
    over the record read."""
    tokens = store.tokens()
    if tokens is None:
        return "no login is stored"
    expires = store.expires_at()
    if expires is not None and expires <= now and not tokens.refresh_token:
        return "its login expired and cannot be refreshed"
    return None


class KernosOAuth(OAuthClientProvider):
    """The SDK's provider, told the stored token's expiry and the configured scopes; with no
    person to ask (a run), a token the server refuses with a 401 is refreshed rather than
    re-authorized.

    ``refused`` holds the :class:`McpLoginNeeded` raised when the SDK asked for a person and
    none was there (a refresh failed in a run, or a step-up).
    """

    def __init__(
        self,
        server: str,
        config: McpServerConfig,
        store: TokenFile,
        *,
        config_file: Path | None,
        redirect_uri: str = _NO_REDIRECT,
        redirect_handler: Callable[[str], Awaitable[None]] | None = None,
        callback_handler: Callable[[], Awaitable[AuthorizationCodeResult]] | None = None,
    ) -> None:
        assert config.url is not None
        self.server = server
        self.store = store
        self.config_file = config_file
        self.refused: McpLoginNeeded | None = None
        #: the scopes a 403 ``insufficient_scope`` asked for beyond the login's (a step-up)
        self.step_up: list[str] = []
        #: the tool whose call met the step-up (the first refused after it)
        self.step_up_tool: str | None = None
        self._scopes = union_scopes(" ".join(config.scopes) or None, store.wanted_scopes())
        self._person = redirect_handler is not None
        self._refreshing = False
        self._refresh_lock = RefreshLock(store.path)
        metadata = OAuthClientMetadata(
            client_name=_CLIENT_NAME,
            redirect_uris=[redirect_uri],
            scope=self._scopes,
            token_endpoint_auth_method="client_secret_post" if config.client_secret_env else "none",
        )
        super().__init__(
            config.url,
            metadata,
            store,
            redirect_handler=redirect_handler or self._no_person,
            callback_handler=callback_handler or self._no_callback,
            client_metadata_url=config.client_metadata_url,
        )

    def _missing_scopes(self) -> list[str]:
        """The scopes the flow asks for that the stored login did not grant."""
        wanted = (self.context.client_metadata.scope or "").split()
        tokens = self.context.current_tokens
        granted = set((tokens.scope or "").split()) if tokens is not None else set()
        return [scope for scope in wanted if scope not in granted]

    async def _no_person(self, url: str) -> None:
        wanted = (self.context.client_metadata.scope or "").split()
        tokens = self.context.current_tokens
        missing = self._missing_scopes()
        if tokens is not None and missing:
            # a step-up: the next login asks for the union of the scopes seen
            self.store.want_scopes(wanted)
            problem = f"the server asks for more scope ({' '.join(missing)}) than the login gave"
            self.step_up = missing
        else:
            problem = "its login expired or was refused, and a refresh did not renew it"
        self.refused = McpLoginNeeded(self.config_file, self.server, problem)
        raise self.refused

    async def _no_callback(self) -> AuthorizationCodeResult:  # never reached: _no_person raised
        raise OAuthFlowError("no redirect can be received outside `kernos mcp login`")

    # The SDK's own steps, each extended by one line (their names are the SDK's, not public API):
    async def _initialize(self) -> None:
        await super()._initialize()
        # the SDK loads the tokens but not their expiry: restore it, so an expired token is
        # refreshed before use rather than sent and answered with a 401
        self.context.token_expiry_time = self.store.expires_at()

    async def _perform_authorization(self) -> Any:
        # the SDK asks for the scopes the server names; kernos asks for the configured ones too
        self.context.client_metadata.scope = union_scopes(
            self.context.client_metadata.scope, self._scopes
        )
        tokens = self.context.current_tokens
        if (
            not self._person
            and tokens is not None
            and tokens.refresh_token
            and not self._missing_scopes()
        ):
            # a 401 on a token kernos thought valid (revoked, or expired early): with no person
            # to ask, the refresh grant is the way back; its answer goes through the SDK's own
            # token handling (below)
            self._refreshing = True
            return await self._refresh_token()
        return await super()._perform_authorization()

    def _fit_secret_method(self) -> None:
        """A configured client with a secret authenticates at the token endpoint the way the
        authorization server's metadata says (:func:`secret_method`); a later process, which
        refreshes without discovering the metadata again, uses the way stored then."""
        client = self.store.client
        if client is None or not client.client_secret:
            return
        metadata = self.context.oauth_metadata
        method: str | None
        if metadata is not None:
            method = secret_method(metadata.token_endpoint_auth_methods_supported)
            self.store.remember_secret_method(method)
        else:
            method = self.store.secret_method() or client.token_endpoint_auth_method
        client.token_endpoint_auth_method = method

    async def _exchange_token_authorization_code(self, auth_code: str, code_verifier: str) -> Any:
        self._fit_secret_method()
        return await super()._exchange_token_authorization_code(auth_code, code_verifier)

    def _adopt_stored(self) -> None:
        """Take the stored tokens when another process (or provider) replaced the ones this
        one holds since it read them: theirs are the newest, and the refresh token this one
        holds may already be spent."""
        stored, held = self.store.tokens(), self.context.current_tokens
        if stored is not None and (held is None or stored.refresh_token != held.refresh_token):
            self.context.current_tokens = stored
            self.context.token_expiry_time = self.store.expires_at()

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self._initialized and not self.context.is_token_valid():
            self._adopt_stored()  # refreshed elsewhere already: no refresh of its own
        flow = super().async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            self._refresh_lock.release()  # a refresh cut short (its request failed) lets go
            await flow.aclose()

    async def _refresh_token(self) -> Any:
        # read, refresh, write under the lock; the stored token is read again once it is held
        await self._refresh_lock.acquire()
        self._adopt_stored()
        self._fit_secret_method()
        return await super()._refresh_token()

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        try:
            return await super()._handle_refresh_response(response)
        finally:
            self._refresh_lock.release()

    async def _handle_token_response(self, response: Any) -> None:
        refreshing, self._refreshing = self._refreshing, False
        try:
            await super()._handle_token_response(response)
        except OAuthTokenError:
            if not refreshing:
                raise
            self.context.clear_tokens()
            self.refused = McpLoginNeeded(
                self.config_file,
                self.server,
                "the server refused its token, and a refresh did not renew it",
            )
            raise self.refused from None
        finally:
            self._refresh_lock.release()  # the tokens a refresh on a 401 got are written


def login_refusal(
    oauth: KernosOAuth | None, offered: str, details: dict[str, Any]
) -> ToolResult | None:
    """The coded result of a call the server refused for want of a login kernos would not wait
    for (a scope step-up, or an expiry no refresh renewed), or None when that is not why."""
    if oauth is None or oauth.refused is None:
        return None
    server = oauth.server
    if oauth.step_up and oauth.step_up_tool in (None, offered):
        needed = " ".join(oauth.step_up)
        text = (
            f"`{offered}` needs scope {needed} on MCP server [{server}], which its login did not "
            f"grant; a person must run `kernos mcp login {server}` to grant it. Do the task "
            "without this tool for now."
        )
    elif oauth.step_up:
        text = (
            f"MCP server [{server}] closed its connection when a call needed more scope than "
            f"its login gave, so `{offered}` cannot be used in this run; a person must run "
            f"`kernos mcp login {server}`."
        )
    else:
        text = (
            f"The login to MCP server [{server}] expired and could not be renewed, so "
            f"`{offered}` cannot be used; a person must run `kernos mcp login {server}`."
        )
    if oauth.step_up and oauth.step_up_tool is None:
        oauth.step_up_tool = offered
    return ToolResult(
        text=text,
        details={
            **details,
            "code": "mcp_login_needed",
            "stage": "execute",
            "scopes": oauth.step_up,
        },
        is_error=True,
    )


def configured_client(
    config: McpServerConfig, redirect_uri: str, config_file: Path | None, server: str
) -> OAuthClientInformationFull | None:
    """The pre-registered client ``client_id`` / ``client_secret_env`` name, or None.

    Raises:
        ConfigError: ``client_secret_env`` names an unset variable.
    """
    if config.client_id is None:
        return None
    secret = None
    if config.client_secret_env is not None:
        secret = os.environ.get(config.client_secret_env, "").strip()
        if not secret:
            raise ConfigError(
                config_file,
                f"mcp.{server}.client_secret_env",
                f"the variable {config.client_secret_env} is unset or empty",
                "set it to the OAuth client's secret",
            )
        register_secrets(secret)
    return OAuthClientInformationFull(
        client_id=config.client_id,
        client_secret=secret,
        redirect_uris=[redirect_uri],
        token_endpoint_auth_method="client_secret_post" if secret else "none",
    )


def uses_oauth(server: str, config: McpServerConfig, home: Path) -> bool:
    """Whether ``[mcp.SERVER]`` is an OAuth server: it says ``auth = "oauth"``, or it has no
    ``auth`` key and a login to it is stored (its 401 was discovered to ask for one)."""
    if config.auth == "oauth":
        return True
    if config.url is None:
        return False
    return TokenFile(token_path(home, server), config.url).tokens() is not None


def oauth_challenge(status: int, www_authenticate: str | None) -> str | None:
    """The protected resource metadata URL a ``401`` response's ``WWW-Authenticate`` names (the
    MCP authorization spec's way of saying the server wants an OAuth login), or None. Pure."""
    if status != 401 or not www_authenticate:
        return None
    scheme, _, params = www_authenticate.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    found = re.search(r'resource_metadata="([^"]+)"|resource_metadata=([^\s,]+)', params)
    return (found[1] or found[2]) if found else None


def challenge_refusal(server: str, url: str, config_file: Path | None) -> McpLoginNeeded:
    """The one line of a run whose server (no ``auth`` key) answered with an OAuth challenge
    and no login to it is stored."""
    return McpLoginNeeded(
        config_file,
        server,
        f"the server asks for an OAuth login (HTTP 401 naming its resource metadata, {url}) "
        "and no login is stored",
    )


def run_auth(
    server: str, config: McpServerConfig, home: Path, *, config_file: Path | None
) -> KernosOAuth:
    """The OAuth of a run (or a status check): the stored login, refreshed silently, never a
    person asked.

    Raises:
        McpLoginNeeded: no usable login is stored (checked before any connection).
    """
    assert config.url is not None
    client = configured_client(config, _NO_REDIRECT, config_file, server)
    store = TokenFile(token_path(home, server), config.url, client)
    problem = login_state(store, time.time())
    if problem is not None:
        raise McpLoginNeeded(config_file, server, problem)
    return KernosOAuth(server, config, store, config_file=config_file)


class _OAuthLogToKernos(logging.Filter):
    """On the SDK's OAuth logger (which has no handler, so its warnings would reach stderr
    through logging's last resort, a traceback and all): its records go to kernos's log
    instead, and kernos says what failed once, as one line. A login kernos refused to wait
    for is that line already, and is not logged again."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, McpLoginNeeded) and log.hasHandlers():
            log.log(record.levelno, "MCP OAuth: %s", record.getMessage(), exc_info=record.exc_info)
        return False


_QUIET = _OAuthLogToKernos()
_sdk_log = logging.getLogger(OAuthClientProvider.__module__)
if _QUIET not in _sdk_log.filters:
    _sdk_log.addFilter(_QUIET)
