"""Real local peers for the channel tests: a loopback HTTP receiver, aiosmtpd on loopback and a
recording channel."""

from __future__ import annotations

import email
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword

from kernos.output import Channel, ChannelError, OutputContext, OutputItem


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    method: str = "POST"


Responder = Callable[[Received], tuple[int, Any]]


def _ok(request: Received) -> tuple[int, Any]:
    return 200, {"status": "ok", "retcode": 0, "data": {"message_id": 1}}


@dataclass
class Receiver:
    """A loopback HTTP server that records each POST (and GET: a fetch) and answers through
    ``respond``."""

    respond: Responder = _ok
    received: list[Received] = field(default_factory=list)
    #: answer HTTP/1.1 and keep each connection open for the next request
    keep_alive: bool = False
    #: TCP connections accepted, and those the client has since closed
    opened: int = 0
    closed: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if receiver.keep_alive else "HTTP/1.0"

            def setup(self) -> None:
                receiver.opened += 1
                super().setup()

            def finish(self) -> None:
                super().finish()
                receiver.closed += 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                request = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                receiver.received.append(request)
                status, answer = receiver.respond(request)
                self._answer(status, answer)

            def do_GET(self) -> None:
                request = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, None)
                request.method = "GET"
                receiver.received.append(request)
                self._answer(*receiver.respond(request))

            def _answer(self, status: int, answer: Any) -> None:
                data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    peer = Receiver().start()
    try:
        yield peer
    finally:
        peer.stop()


@dataclass
class Recorder:
    """A channel handler that records every call and fails the items it is told to."""

    fail: dict[int, str] = field(default_factory=dict)
    calls: list[tuple[OutputItem, OutputContext]] = field(default_factory=list)

    async def __call__(self, item: OutputItem, ctx: OutputContext) -> None:
        self.calls.append((item, ctx))
        if ctx.index in self.fail:
            raise ChannelError(self.fail[ctx.index])

    @property
    def items(self) -> list[OutputItem]:
        return [item for item, _ in self.calls]

    def channel(self, name: str = "qq", **kwargs: Any) -> Channel:
        return Channel(name, self, **kwargs)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Inbox:
    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Envelope) -> str:
        self.envelopes.append(envelope)
        return "250 OK"

    def messages(self) -> list[Message]:
        return [email.message_from_bytes(e.content) for e in self.envelopes]  # type: ignore[arg-type]


def authenticate(
    server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
) -> AuthResult:
    ok = isinstance(auth_data, LoginPassword) and auth_data.password == b"mail-pass-123"
    return AuthResult(success=ok, handled=False)


@pytest.fixture
def smtp(unused_port: int) -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    controller = Controller(
        inbox,
        hostname="127.0.0.1",
        port=unused_port,
        authenticator=authenticate,
        auth_require_tls=False,
    )
    controller.start()
    try:
        yield inbox, unused_port
    finally:
        controller.stop()
