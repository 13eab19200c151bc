"""The lean engine's wire: OpenAI-compatible Chat Completions over one pooled ``httpx2`` client.

Pure parts (the request body, a completion, the SSE stream's chunks) are plain functions over plain
data; :class:`ChatEndpoint` is the one place that does I/O. A client is made per endpoint (base
URL and key) per event loop, on first use: connections belong to the loop that opened them, and a
test or a CLI command that runs ``asyncio.run`` twice gets a working pool each time. No CA bundle
is loaded for an ``http://`` endpoint (``verify=False``: there is no TLS to verify).

Retries (429 and 5xx, connection errors) are ``tenacity``'s: exponential backoff with jitter, or
the server's ``Retry-After`` / ``retry-after-ms`` when it sends one; ``x-should-retry: false``
(which OpenAI-compatible servers send for errors that will not heal) is honoured, as the openai SDK
does. Provider errors are pydantic-ai's exception classes (``ModelHTTPError`` and its categories),
so a caller sees the same failure whichever provider answered.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpcore2
import httpx2
from httpcore2._utils import is_socket_readable
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelHTTPError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelRequestRejectedError,
    ModelServerError,
    UnexpectedModelBehavior,
)
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from kernos.boundary import clean_json_text, clean_text
from kernos.errors import KernosError

ATTEMPTS = 3  # the openai SDK's default too: one request and two retries
_MAX_WAIT = 60.0  # a Retry-After longer than this is cut to it (a run should not sleep for hours)
_TIMEOUT = httpx2.Timeout(600.0, connect=10.0)
_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=1000)
_DUMP = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class ModelResponseError(UnexpectedModelBehavior, KernosError):
    """The server answered with something that is not a Chat Completion (a malformed stream chunk,
    a body that is not JSON): ``code`` says which, the message says what to check. A model
    failure of pydantic-ai's family, and one of kernos's errors (:mod:`kernos.errors`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Reply:
    """One assistant answer: text, tool calls ``(id, name, arguments text)``, usage, model."""

    text: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    model_name: str | None = None
    finish_reason: str | None = None
    #: who answered (the usage rows' ``provider``): the Chat Completions wire is ``openai``'s
    provider_name: str | None = "openai"


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept (what goes on the wire)."""
    return _DUMP(value)


def tools_fragment(tools: list[dict[str, Any]]) -> str:
    """The ``"tools"`` part of a request body, serialized once per tool set."""
    if not tools:
        return ""
    return ',"tools":' + dumps(tools) + ',"tool_choice":"auto"'


def request_body(model: str, messages: list[dict[str, Any]], tools: str, stream: bool) -> bytes:
    """A Chat Completions request: the tools text is spliced in as it is (serialized once)."""
    tail = (
        ',"stream":true,"stream_options":{"include_usage":true}}' if stream else ',"stream":false}'
    )

    return ('{"model":' + dumps(model) + ',"messages":' + dumps(messages) + tools + tail).encode()


def _usage_into(reply: Reply, usage: Any) -> None:
    if not isinstance(usage, Mapping):
        return
    reply.input_tokens = _int(usage.get("prompt_tokens"))
    reply.output_tokens = _int(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    if isinstance(details, Mapping):
        reply.cached_tokens = _int(details.get("cached_tokens"))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _bad(what: str) -> ModelResponseError:
    return ModelResponseError(
        "bad_response",
        f"the model server sent {what}; check that base_url points at an OpenAI-compatible "
        "Chat Completions endpoint",
    )


def parse_completion(data: Any) -> Reply:
    """A non-streamed ``chat.completion`` as a :class:`Reply` (model text cleaned once, here).

    Raises:
        ModelResponseError: it has no ``choices[0].message``.
    """
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise _bad("a completion without choices[0].message") from None
    if not isinstance(message, Mapping):
        raise _bad("a completion whose message is not an object")
    reply = Reply(model_name=data.get("model"), finish_reason=choice.get("finish_reason"))
    content = message.get("content")
    if isinstance(content, str):
        reply.text = clean_text(content)
    for n, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            raise _bad("a tool call without a function")
        arguments = function.get("arguments")
        reply.calls.append(
            (
                clean_text(str(call.get("id") or f"call_{n}")),
                clean_text(str(function.get("name") or "")),
                clean_json_text(
                    arguments if isinstance(arguments, str) else dumps(arguments or {})
                ),
            )
        )
    _usage_into(reply, data.get("usage"))
    return reply


class StreamAccumulator:
    """Joins ``chat.completion.chunk`` objects into one :class:`Reply`; ``feed`` returns the text
    delta of a chunk (``""`` when it carried none)."""

    def __init__(self) -> None:
        self.reply = Reply()
        self._texts: list[str] = []
        self._calls: dict[int, list[str]] = {}  # index -> [id, name, arguments...]

    def feed_line(self, line: str) -> str | None:
        """One SSE line; returns the text delta, or ``None`` at ``[DONE]``.

        Raises:
            ModelResponseError: a ``data:`` line that is not a JSON chunk.
        """
        if not line.startswith("data:"):
            return ""  # blank separators, comments (": keep-alive"), event:/id: fields
        payload = line[5:].strip()
        if payload == "[DONE]":
            return None
        try:
            chunk = json.loads(payload)
        except ValueError:
            shown = payload if len(payload) <= 80 else payload[:77] + "..."
            raise _bad(f"a stream chunk that is not JSON ({shown!r})") from None
        return self.feed(chunk)

    def feed(self, chunk: Any) -> str:
        if not isinstance(chunk, Mapping):
            raise _bad("a stream chunk that is not an object")
        if isinstance(chunk.get("error"), Mapping):
            message = chunk["error"].get("message")
            raise ModelResponseError(
                "stream_error", f"the model server reported an error in the stream: {message}"
            )
        if chunk.get("model"):
            self.reply.model_name = chunk["model"]
        if chunk.get("usage"):
            _usage_into(self.reply, chunk["usage"])
        choices = chunk.get("choices")
        if choices is None:
            choices = []
        if not isinstance(choices, list):
            raise _bad("a stream chunk whose choices is not a list")
        delta_text = ""
        for choice in choices:
            delta = choice.get("delta") if isinstance(choice, Mapping) else None
            if delta is None:
                continue
            if not isinstance(delta, Mapping):
                raise _bad("a stream chunk whose delta is not an object")
            if choice.get("finish_reason"):
                self.reply.finish_reason = choice["finish_reason"]
            content = delta.get("content")
            if isinstance(content, str) and content:
                delta_text += content
            for call in delta.get("tool_calls") or ():
                if not isinstance(call, Mapping):
                    raise _bad("a stream tool call that is not an object")
                index = call.get("index", 0)
                entry = self._calls.setdefault(index if isinstance(index, int) else 0, ["", ""])
                if call.get("id"):
                    entry[0] = str(call["id"])
                function = call.get("function")
                if isinstance(function, Mapping):
                    if function.get("name"):
                        entry[1] += str(function["name"])
                    if isinstance(function.get("arguments"), str):
                        entry.append(function["arguments"])
        if delta_text:
            self._texts.append(delta_text)
        return delta_text

    def finish(self) -> Reply:
        reply = self.reply
        reply.text = clean_text("".join(self._texts))
        for n, index in enumerate(sorted(self._calls)):
            call_id, name, *pieces = self._calls[index]
            reply.calls.append(
                (
                    clean_text(call_id or f"call_{n}"),
                    clean_text(name),
                    clean_json_text("".join(pieces)),
                )
            )
        return reply


# -- errors ------------------------------------------------------------------------------------


class _Retryable(Exception):
    """A failure worth another attempt; ``error`` is what is raised when attempts run out."""

    def __init__(self, error: ModelAPIError, wait: float | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.wait = wait


def _category(status: int) -> type[Any] | None:
    if status in (401, 403):
        return ModelAuthenticationError
    if status == 404:
        return ModelNotFoundError
    if status == 429:
        return ModelRateLimitError
    if status >= 500:
        return ModelServerError
    if 400 <= status < 500:
        return ModelRequestRejectedError
    return None


def http_error(status: int, model: str, text: str, headers: Mapping[str, str]) -> ModelHTTPError:
    """The pydantic-ai error for an HTTP error answer (the body's ``error`` object when present,
    as the openai SDK reports it)."""
    body: Any = text
    try:
        parsed = json.loads(text)
        body = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
    except ValueError:
        pass
    return ModelHTTPError.for_category(
        _category(status), status_code=status, model_name=model, body=body, headers=headers
    )


def retry_wait(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``, else ``Retry-After`` seconds)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            seconds = float(raw) * scale
        except ValueError:
            continue  # an HTTP-date: back off as usual
        if seconds >= 0:
            return min(seconds, _MAX_WAIT)
    return None


def should_retry(status: int, headers: Mapping[str, str]) -> bool:
    if headers.get("x-should-retry") == "false":
        return False
    if headers.get("x-should-retry") == "true":
        return True
    return status in (408, 409, 429) or status >= 500


_BACKOFF = wait_random_exponential(multiplier=0.5, max=8)


def _wait(state: Any) -> float:
    error = state.outcome.exception() if state.outcome is not None else None
    if isinstance(error, _Retryable) and error.wait is not None:
        return error.wait
    return float(_BACKOFF(state))


# -- the endpoint --------------------------------------------------------------------------------


class _ProbedStream(httpcore2.AsyncNetworkStream):
    """A connection whose "is the idle socket readable?" probe is one ``poll`` on a socket
    found once. httpcore2's pool probes every idle connection each time it assigns a request;
    through anyio each probe rebuilds the stream's attribute table (measured: most of the
    client CPU at 200 concurrent sessions, bench/engine.py)."""

    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, *args: Any, **kwargs: Any) -> httpcore2.AsyncNetworkStream:
        return await self._inner.start_tls(*args, **kwargs)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and self._socket is not None:
            return is_socket_readable(self._socket)
        return self._inner.get_extra_info(info)


class _ProbedBackend(httpcore2.AsyncNetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore2.AsyncNetworkStream:
        return _ProbedStream(await self._inner.connect_tcp(*args, **kwargs))

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore2.AsyncNetworkStream:
        return await self._inner.connect_unix_socket(*args, **kwargs)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _transport(verify: bool) -> httpx2.AsyncHTTPTransport:
    transport = httpx2.AsyncHTTPTransport(verify=verify, limits=_LIMITS)
    pool = getattr(transport, "_pool", None)
    if pool is not None and hasattr(pool, "_network_backend"):  # else: httpx2's own, slower
        pool._network_backend = _ProbedBackend()
    return transport


class ChatEndpoint:
    """One OpenAI-compatible endpoint (base URL and key); its pooled client per event loop."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx2.AsyncClient]
        self._clients = weakref.WeakKeyDictionary()

    def client(self) -> httpx2.AsyncClient:
        """This loop's pooled client (made on first use)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            client = self._clients[loop] = httpx2.AsyncClient(
                headers=self._headers,
                timeout=_TIMEOUT,
                # http://: no CA bundle to load
                transport=_transport(verify=not self.url.startswith("http://")),
            )
        return client

    async def aclose(self) -> None:
        """Close this event loop's client (the next request opens a new one)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    async def complete(
        self,
        model: str,
        body: bytes,
        *,
        on_delta: Callable[[str], None] | None = None,
        attempts: int = ATTEMPTS,
        timeout: float | None = None,
    ) -> Reply:
        """POST one request (streamed when ``on_delta`` is given), with retries: at most
        ``attempts`` tries, each within ``timeout`` seconds (``None``: the client's).

        Raises:
            ModelHTTPError: an error status (after the retries for 429/5xx).
            ModelConnectionError: the server could not be reached (after the retries).
            ModelResponseError: the answer is not a Chat Completion.
        """
        # the first attempt runs before tenacity is set up: its loop (a call state, a Future and
        # its lock per attempt, and the garbage they leave) was about a tenth of a request's CPU
        # at one session (bench/engine.py). A first failure is handed to tenacity as its first
        # attempt's, so the retries and their waits are tenacity's as they would have been.
        first: _Retryable | None
        try:
            return await self._attempt(model, body, on_delta, timeout)
        except _Retryable as failed:
            first = failed
        retrying = AsyncRetrying(
            stop=stop_after_attempt(max(1, attempts)),
            wait=_wait,
            retry=retry_if_exception(lambda e: isinstance(e, _Retryable)),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    if first is not None:
                        handed, first = first, None
                        raise handed
                    return await self._attempt(model, body, on_delta, timeout)
        except _Retryable as spent:
            raise spent.error from spent.error.__cause__
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover

    async def _attempt(
        self, model: str, body: bytes, on_delta: Callable[[str], None] | None, timeout: float | None
    ) -> Reply:
        if on_delta is None:
            return await self._once(model, body, timeout)
        return await self._stream(model, body, on_delta, timeout)

    async def _once(self, model: str, body: bytes, timeout: float | None) -> Reply:
        try:
            response = await self.client().post(self.url, content=body, timeout=_timeout(timeout))
        except httpx2.TransportError as exc:
            raise _connection(model, exc) from exc
        if response.status_code >= 400:
            raise _status(model, response.status_code, response.text, response.headers)
        try:
            data = json.loads(response.content)
        except ValueError:
            raise _bad("a body that is not JSON") from None
        return parse_completion(data)

    async def _stream(
        self, model: str, body: bytes, on_delta: Callable[[str], None], timeout: float | None
    ) -> Reply:
        accumulator = StreamAccumulator()
        started = False
        try:
            async with self.client().stream(
                "POST", self.url, content=body, timeout=_timeout(timeout)
            ) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", "replace")
                    raise _status(model, response.status_code, text, response.headers)
                async for line in response.aiter_lines():
                    delta = accumulator.feed_line(line)
                    if delta is None:
                        break
                    if delta:
                        started = True
                        on_delta(clean_text(delta))
        except httpx2.TransportError as exc:
            error = _connection(model, exc)
            if started:  # text was shown already: a second attempt would show it twice
                raise error.error from exc
            raise error from exc
        return accumulator.finish()


def _timeout(seconds: float | None) -> httpx2.Timeout:
    if seconds is None:
        return _TIMEOUT
    return httpx2.Timeout(seconds, connect=min(seconds, 10.0))


def _status(model: str, status: int, text: str, headers: httpx2.Headers) -> Exception:
    lowered = {k.lower(): v for k, v in headers.items()}
    error = http_error(status, model, text, lowered)
    if should_retry(status, lowered):
        return _Retryable(error, retry_wait(lowered))
    return error


def _connection(model: str, exc: httpx2.TransportError) -> _Retryable:
    detail = str(exc) or type(exc).__name__
    return _Retryable(ModelConnectionError(model, f"cannot reach the model server: {detail}"), None)


_ENDPOINTS: dict[tuple[str, str], ChatEndpoint] = {}


def shared_endpoint(base_url: str, api_key: str) -> ChatEndpoint:
    """The process's endpoint for (base URL, key), made on first use."""
    endpoint = _ENDPOINTS.get((base_url, api_key))
    if endpoint is None:
        endpoint = _ENDPOINTS[base_url, api_key] = ChatEndpoint(base_url, api_key)
    return endpoint
