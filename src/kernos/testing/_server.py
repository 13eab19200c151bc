"""A scripted OpenAI-compatible Chat Completions server on loopback, in a daemon thread.

Stdlib only (``http.server``), so the same server serves a sync test, an async test whose event loop
must not be blocked, and a ``kernos run`` subprocess pointed at it through ``OPENAI_BASE_URL``.
One connection per request (HTTP/1.0): nothing is left half-open when a test stops the server.
"""

from __future__ import annotations

import copy
import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from kernos.testing import _wire
from kernos.testing._replies import Reply, content_text, latest_message

_CHAT_PATH = "/v1/chat/completions"
_MODELS_PATH = "/v1/models"
_TEST_KEY = "test-key"
_QUIET_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class FakeOpenAIServer:
    """A local Chat Completions endpoint that answers from a script and records every request.

    Each ``POST /v1/chat/completions`` takes the first unconsumed reply (in script order) whose
    ``when`` matches, and consumes it unless it repeats. A request nothing matches gets HTTP 500
    naming its latest message, and is kept in :attr:`unmatched` — a script gap shows up as a clear
    failure, never as a hang or a made-up answer.

    Args:
        *replies: an initial script; :meth:`script` appends more.
        delay: seconds to wait before each answer (settable later; for latency benchmarks).
        host: the address to bind (default loopback), e.g. a virtual link's host end, for
            clients in another network namespace.
        port: the port to bind (default 0: a free one), e.g. 11434 to stand in for a local
            Ollama where nothing else can listen (a network namespace of its own).

    Example::

        with FakeOpenAIServer(tool_call("lookup", {"q": "x"}), text("done")) as server:
            run_my_agent(base_url=server.base_url, api_key="test-key")
        assert server.tool_results() == ["x found"]
    """

    def __init__(
        self, *replies: Reply, delay: float = 0.0, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.delay = delay
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._script: list[Reply] = list(replies)
        self._requests: list[dict[str, Any]] = []
        self._auth_headers: list[str] = []
        self._clients: list[str] = []
        self._unmatched: list[str] = []
        self._counter = 0
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        """Bind :attr:`port` (0: a free one) on :attr:`host` and serve in a daemon thread;
        returns ``self``.

        Raises:
            RuntimeError: the server is already running.
        """
        if self._httpd is not None:
            raise RuntimeError("FakeOpenAIServer is already running; call stop() before start()")
        httpd = _HTTPServer((self.host, self.port), _Handler)
        httpd.fake = self
        thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"FakeOpenAIServer:{httpd.server_address[1]}",
            daemon=True,
        )
        thread.start()
        self._httpd, self._thread = httpd, thread
        return self

    def stop(self) -> None:
        """Stop serving and release the port; waits for answers in flight. Safe to call twice."""
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- configuration -----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1`` — what an OpenAI client takes as its base URL.

        Raises:
            RuntimeError: the server is not running.
        """
        if self._httpd is None:
            raise RuntimeError(
                "FakeOpenAIServer is not running; call start() or use it as a context manager"
            )
        return f"http://{self.host}:{self._httpd.server_address[1]}/v1"

    def env(self) -> dict[str, str]:
        """Environment variables that point an OpenAI client in a subprocess at this server."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": _TEST_KEY}

    def script(self, *replies: Reply) -> None:
        """Append ``replies`` to the script; safe while requests are being answered."""
        with self._lock:
            self._script.extend(replies)

    # -- what happened -----------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every chat completions request body received, in arrival order (a copy)."""
        with self._lock:
            return copy.deepcopy(self._requests)

    @property
    def auth_headers(self) -> list[str]:
        """The ``Authorization`` header of each entry in :attr:`requests` (``""`` when absent).

        Kept for assertions only; the server never prints or logs it.
        """
        with self._lock:
            return list(self._auth_headers)

    @property
    def clients(self) -> list[str]:
        """The address each entry in :attr:`requests` came from (which process, which host)."""
        with self._lock:
            return list(self._clients)

    @property
    def unmatched(self) -> list[str]:
        """The error message sent for each request the script had no reply for, in order."""
        with self._lock:
            return list(self._unmatched)

    def tool_results(self) -> list[str]:
        """Every ``role: tool`` message content seen, in order, once per ``tool_call_id``.

        Clients resend the whole conversation each turn; deduplicating by id turns that back into
        the list of results the tools actually produced.
        """
        seen: set[str] = set()
        results: list[str] = []
        for request in self.requests:
            for message in request.get("messages") or ():
                if not isinstance(message, dict) or message.get("role") != "tool":
                    continue
                content = content_text(message)
                key = str(message.get("tool_call_id") or f"\0{content}")
                if key not in seen:
                    seen.add(key)
                    results.append(content)
        return results

    def assert_all_consumed(self) -> None:
        """Fail the test if any non-repeating reply was never used.

        Raises:
            AssertionError: listing each leftover reply.
        """
        with self._lock:
            leftover = [reply for reply in self._script if not reply.repeat]
        if leftover:
            lines = "\n".join(f"  - {reply.describe()}" for reply in leftover)
            raise AssertionError(f"{len(leftover)} scripted replies were never used:\n{lines}")

    def __repr__(self) -> str:
        state = self.base_url if self._httpd is not None else "stopped"
        return (
            f"<FakeOpenAIServer {state} replies={len(self._script)} requests={len(self._requests)}>"
        )

    # -- serving (called from handler threads) -----------------------------------------------

    def _answer(self, request: dict[str, Any], authorization: str) -> _Planned | str:
        """Record ``request`` and pick its answer, or return the error message for a script gap."""
        with self._lock:
            self._requests.append(request)
            self._auth_headers.append(authorization)
            self._clients.append(getattr(_client, "address", ""))
            reply = self._take(request)
            if reply is None:
                latest = latest_message(request)[:200]
                message = (
                    f"FakeOpenAIServer: the script has no reply for a request whose latest message "
                    f"is {latest!r}; add one with server.script(...) or loosen a when= condition"
                )
                self._unmatched.append(message)
                return message
            self._counter += 1
            completion_id = f"chatcmpl-{self._counter}"
            call_ids = []
            for _ in reply.calls:
                self._counter += 1
                call_ids.append(f"call_{self._counter}")
        return _Planned(reply, completion_id, call_ids)

    def _take(self, request: dict[str, Any]) -> Reply | None:
        for index, reply in enumerate(self._script):
            if reply.matches(request):
                if not reply.repeat:
                    del self._script[index]
                return reply
        return None


@dataclass(frozen=True)
class _Planned:
    reply: Reply
    completion_id: str
    call_ids: list[str]

    def ids(self) -> _wire.Ids:
        return {
            "completion_id": self.completion_id,
            "call_ids": self.call_ids,
            "created": int(time.time()),
        }


_client = threading.local()  # the peer of the request this handler thread is answering
_HOLD_LIMIT = 60.0  # a held reply is sent anyway after this long, so a forgotten event never hangs


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], _QUIET_ERRORS):
            return  # the client went away mid-answer; nothing for the test to learn
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    timeout = 30  # a client that connects and never sends must not pin stop() forever
    server_version = "kernos-fake-openai"

    def log_message(self, format: str, *args: Any) -> None:
        # Silent: test output stays clean and request headers (the API key) are never printed.
        pass

    def do_GET(self) -> None:
        if self._path() == _MODELS_PATH:
            self._send_json(200, _wire.models())
        else:
            self._not_found()

    def do_POST(self) -> None:
        if self._path() != _CHAT_PATH:
            self._not_found()
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            self._send_json(
                400,
                _wire.error(
                    f"request body is not JSON: {exc}", "invalid_request_error", "bad_json"
                ),
            )
            return
        if not isinstance(request, dict):
            self._send_json(
                400,
                _wire.error(
                    "request body must be a JSON object", "invalid_request_error", "bad_json"
                ),
            )
            return
        fake = self.server.fake
        try:
            _client.address = str(self.client_address[0])  # for _answer, in this thread
            planned = fake._answer(request, self.headers.get("Authorization") or "")
        except Exception as exc:  # a when= callable raised: say so rather than drop the connection
            message = f"FakeOpenAIServer: matching the script failed: {type(exc).__name__}: {exc}"
            self._send_json(500, _wire.error(message, "server_error", "script_error"))
            return
        if isinstance(planned, str):
            self._send_json(500, _wire.error(planned, "server_error", "unscripted_request"))
            return
        if planned.reply.hold is not None:
            planned.reply.hold.wait(_HOLD_LIMIT)
        if fake.delay > 0:
            time.sleep(fake.delay)
        if planned.reply.status != 200:
            key = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            message = (planned.reply.content or "").replace("{api_key}", key)
            kind = "invalid_request_error" if planned.reply.status < 500 else "server_error"
            self._send_json(
                planned.reply.status,
                _wire.error(message, kind, "scripted_error"),
                retry_after=planned.reply.retry_after,
            )
            return
        if request.get("stream"):
            self._send_stream(_wire.chunks(planned.reply, request, **planned.ids()))
        else:
            self._send_json(200, _wire.completion(planned.reply, request, **planned.ids()))

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def _not_found(self) -> None:
        message = f"FakeOpenAIServer serves {_CHAT_PATH} and {_MODELS_PATH}, not {self._path()!r}"
        self._send_json(404, _wire.error(message, "invalid_request_error", "not_found"))

    def _send_json(self, status: int, body: Any, retry_after: int | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        elif status >= 500:
            # The OpenAI SDK retries 5xx by default; a script gap will not heal on retry.
            self.send_header("x-should-retry", "false")
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, chunks: list[dict[str, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()  # no length: HTTP/1.0 ends the stream by closing the connection
        for event in _events(chunks):
            self.wfile.write(event)
            self.wfile.flush()


def _events(chunks: list[dict[str, Any]]) -> Iterator[bytes]:
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"
