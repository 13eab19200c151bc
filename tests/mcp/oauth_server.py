"""An OAuth-protected MCP server on loopback, built from the SDK's server auth pieces.

``OAuthDocsServer`` runs the SDK's ``MCPServer`` with ``AuthSettings`` (protected resource
metadata, authorization server metadata, dynamic client registration, PKCE, refresh) over
:class:`MemoryAuthServer`, an in-memory ``OAuthAuthorizationServerProvider`` that approves every
authorization at once (the "person" said yes) and can expire or revoke what it issued, so a test
makes a token stale without waiting for a clock.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

SCOPE = "docs.read"
#: the scope the docs server's `publish` tool needs beyond SCOPE (a step-up)
WRITE_SCOPE = "docs.write"
#: what the docs server's one tool answers (a run's tool result shows it)
ANSWER = "docs: 2 pages mention {query!r}"


class _LoopbackClient(OAuthClientInformationFull):
    """A native client: any port of a loopback redirect URI is its (RFC 8252 section 7.3)."""

    def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
        if redirect_uri is not None and redirect_uri.host == "127.0.0.1":
            return redirect_uri
        return super().validate_redirect_uri(redirect_uri)


@dataclass
class MemoryAuthServer:
    """The authorization server's state, in memory; every method is the SDK's provider protocol
    except the test levers (:meth:`expire_access`, :meth:`revoke_refresh`)."""

    access_lifetime: int = 3600
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    #: grant types the token endpoint served, in order ("authorization_code", "refresh_token")
    grants: list[str] = field(default_factory=list)
    #: authorization requests seen (their scopes and resource)
    authorizations: list[AuthorizationParams] = field(default_factory=list)
    #: set: the authorization server's metadata names this issuer instead of its own
    wrong_issuer: str | None = None
    #: refresh tokens presented at the token endpoint, in order, and those already spent
    #: (every refresh rotates the token: a used one is refused, as many servers do)
    presented: list[str] = field(default_factory=list)
    spent: set[str] = field(default_factory=set)
    #: set: the first refresh waits at the token endpoint until this is set
    hold_refresh: threading.Event | None = None
    #: pre-registered public clients (no dynamic registration), any loopback redirect allowed
    preregistered: set[str] = field(default_factory=set)
    #: True: the metadata says client ID metadata documents are supported, and an https client
    #: id is taken on trust as one (the document is not fetched)
    cimd: bool = False
    #: the client id of each authorization request
    authorized_clients: list[str] = field(default_factory=list)

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if client_id in self.preregistered or (self.cimd and client_id.startswith("https://")):
            return _LoopbackClient(
                client_id=client_id,
                redirect_uris=["http://127.0.0.1/callback"],  # type: ignore[list-item]
                token_endpoint_auth_method="none",
                scope=f"{SCOPE} {WRITE_SCOPE}",
            )
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        # a server may widen what it registers (dynamic registration lets it): every scope it
        # knows, so a later step-up may ask for more than the first login did
        client_info.scope = f"{SCOPE} {WRITE_SCOPE}"
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        self.authorizations.append(params)
        self.authorized_clients.append(str(client.client_id))
        code = secrets.token_urlsafe(24)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = "at-" + secrets.token_urlsafe(24)
        refresh = "rt-" + secrets.token_urlsafe(24)
        expires = int(time.time()) + self.access_lifetime
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            expires_in=self.access_lifetime,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self.grants.append("authorization_code")
        return self._issue(
            authorization_code.client_id, authorization_code.scopes, authorization_code.resource
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        self.presented.append(refresh_token)
        if self.hold_refresh is not None and len(self.presented) == 1:
            await asyncio.to_thread(self.hold_refresh.wait, 120)
        return self.refresh.get(refresh_token)

    def reused(self) -> list[str]:
        """The refresh tokens presented again after they were spent."""
        return [t for i, t in enumerate(self.presented) if t in self.presented[:i]]

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError(error="invalid_grant", error_description="refresh token revoked")
        self.spent.add(refresh_token.token)
        self.grants.append("refresh_token")
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes, None)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    # -- test levers ----------------------------------------------------------------------------
    def expire_access(self) -> None:
        """Every access token issued so far is refused from now on (as if its time was up)."""
        self.access.clear()

    def revoke_refresh(self) -> None:
        """Every refresh token issued so far is refused from now on."""
        self.refresh.clear()


class _WriteNeedsScope:
    """ASGI middleware: a ``tools/call`` of ``publish`` whose bearer token lacks WRITE_SCOPE
    gets 403 ``insufficient_scope`` naming the scopes it needs (the MCP step-up challenge); with
    ``wrong_issuer`` set, the authorization server's metadata names another issuer."""

    def __init__(self, app: Any, auth: MemoryAuthServer) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith("/.well-known/oauth-authorization-server")
            and (self.auth.wrong_issuer is not None or self.auth.cimd)
        ):
            updates: dict[str, Any] = {}
            if self.auth.wrong_issuer is not None:
                updates["issuer"] = self.auth.wrong_issuer
            if self.auth.cimd:
                updates["client_id_metadata_document_supported"] = True
            await self._rewrite_metadata(scope, receive, send, updates)
            return
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[Any] = []
        body = b""
        while True:
            message = await receive()
            chunks.append(message)
            body += message.get("body", b"")
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = {}
        params = request.get("params") if isinstance(request, dict) else None
        if (
            isinstance(params, dict)
            and request.get("method") == "tools/call"
            and params.get("name") == "publish"
        ):
            headers = dict(scope.get("headers") or [])
            token = headers.get(b"authorization", b"").decode().removeprefix("Bearer ")
            granted = self.auth.access.get(token)
            if granted is not None and WRITE_SCOPE not in granted.scopes:
                challenge = (
                    f'Bearer error="insufficient_scope", scope="{SCOPE} {WRITE_SCOPE}", '
                    'error_description="publish needs docs.write"'
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 403,
                        "headers": [(b"www-authenticate", challenge)],
                    }
                )
                await send({"type": "http.response.body", "body": b""})
                return

        async def replay() -> Any:
            return chunks.pop(0) if chunks else await receive()

        await self.app(scope, replay, send)

    async def _rewrite_metadata(
        self, scope: Any, receive: Any, send: Any, updates: dict[str, Any]
    ) -> None:
        start: dict[str, Any] = {}
        body = bytearray()

        async def capture(message: Any) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            else:
                body.extend(message.get("body", b""))

        await self.app(scope, receive, capture)
        data = json.loads(bytes(body))
        data.update(updates)
        out = json.dumps(data).encode()
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(out)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": out})


@dataclass
class OAuthDocsServer:
    url: str
    auth: MemoryAuthServer


@contextmanager
def oauth_docs_server() -> Iterator[OAuthDocsServer]:
    """The server, started in a thread on a free loopback port; stopped on exit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    auth = MemoryAuthServer()
    mcp = MCPServer(
        "docs",
        auth_server_provider=auth,
        auth=AuthSettings(
            issuer_url=base,  # type: ignore[arg-type]
            resource_server_url=f"{base}/mcp",  # type: ignore[arg-type]
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
            ),
            required_scopes=[SCOPE],
            validate_token_resource=False,
        ),
    )

    @mcp.tool()
    def search(query: str) -> str:
        """Search the docs."""
        return ANSWER.format(query=query)

    @mcp.tool()
    def publish(page: str) -> str:
        """Publish a page (needs the write scope)."""
        return f"published {page}"

    app = _WriteNeedsScope(mcp.streamable_http_app(), auth)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(600):
        if server.started:
            break
        threading.Event().wait(0.05)
    assert server.started, "the OAuth docs MCP server did not start"
    try:
        yield OAuthDocsServer(f"{base}/mcp", auth)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
