"""A model request that failed, as the one line a person reads and the exit code it earns.

Both engines raise pydantic-ai's exception classes (the lean wire translates its own failures
into them, :mod:`kernos.runtime._models._lean_wire`): :func:`model_failure` reads the category, the
HTTP status and the transport error underneath (``__cause__`` / ``__context__``), never the
library's wording. What configuration must fix (a key rejected, a model that does not exist) exits
2; a run that failed on the way (rate limits and server errors after the retries, an endpoint that
cannot be reached) exits 1. The endpoint is shown without credentials: user info and query are
dropped and the text goes through the secret scrubber.

Pure: no I/O, no clock; a test is one call.
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelHTTPError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelTimeoutError,
)

from kernos.errors import ContextExhausted
from kernos.runtime._errors import EmptyAnswers
from kernos.runtime._secrets import scrub_text

EXIT_FAILED = 1  # the run started and failed on the way
EXIT_CONFIG = 2  # configuration must change before a run can succeed

_MESSAGE_LIMIT = 120


@dataclass(frozen=True)
class ModelTarget:
    """Which model a request went to: ``name`` as configured (an alias or a model string),
    ``url`` its endpoint (``None``: the provider's own), ``key_env`` the variable its key comes
    from, ``alias`` the ``[models.NAME]`` table it is defined by, if any."""

    name: str
    url: str | None = None
    key_env: str | None = None
    alias: str | None = None


@dataclass(frozen=True)
class ModelFailure:
    """A failed model request as a person sees it: ``line`` (one line, no secrets) and
    ``exit_code`` (2 configuration, 1 the run failed on the way); ``kind`` names the case."""

    kind: str
    line: str
    exit_code: int


_KEY_ADVICE = re.compile(r"`([A-Z][A-Z0-9_]*(?:_API_KEY|_TOKEN|_KEY))`")


def missing_key_variable(text: str) -> str | None:
    """The environment variable a provider's "set ``X_API_KEY``" advice names, if any."""
    match = _KEY_ADVICE.search(text)
    return match.group(1) if match else None


def public_url(url: str | None) -> str | None:
    """``url`` without user info, query or fragment, scrubbed of known secrets."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = host + (f":{parts.port}" if parts.port else "")
        shown = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    except ValueError:
        shown = url.split("?", 1)[0]
    return scrub_text(shown.rstrip("/"))


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in seen) and len(seen) < 20:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _transport_kind(exc: BaseException) -> str:
    """``tls``, ``dns``, ``refused``, ``timeout`` or ``connection`` from the errors underneath.

    Transport libraries (httpx2, httpcore2, the openai SDK) wrap the socket's error; their own
    timeout classes are recognized by name so this module imports none of them.
    """
    chain = _chain(exc)
    for error in chain:
        if isinstance(error, ssl.SSLError | ssl.CertificateError):
            return "tls"
    for error in chain:
        if isinstance(error, socket.gaierror):
            return "dns"
    for error in chain:
        if isinstance(error, ConnectionRefusedError):
            return "refused"
    for error in chain:
        if isinstance(error, TimeoutError | ModelTimeoutError | ModelRequestTimeout) or (
            "Timeout" in type(error).__name__
        ):
            return "timeout"
    text = " ".join(str(e) for e in chain).lower()
    if "ssl" in text or "tls" in text or "certificate" in text:
        return "tls"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "dns"
    if "connection refused" in text or "connect call failed" in text:
        return "refused"
    if "timed out" in text:
        return "timeout"
    return "connection"


def _body_message(body: object) -> str:
    message: object = body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message", "") if isinstance(inner, dict) else inner
    text = " ".join(str(message or "").split())
    if len(text) > _MESSAGE_LIMIT:
        text = text[: _MESSAGE_LIMIT - 1] + "…"
    return text


def _where(target: ModelTarget, model_name: str | None) -> str:
    shown = f"model {target.name}"
    if model_name and model_name != target.name and not target.name.endswith(":" + model_name):
        shown += f" ({model_name})"
    url = public_url(target.url)
    return f"{shown} at {url}" if url else shown


def _key_fix(target: ModelTarget) -> str:
    if target.alias is not None and target.key_env:
        return f"set {target.key_env} (models.{target.alias}.api_key_env) to a valid key"
    if target.key_env:
        return f"set {target.key_env} to a valid key"
    return "check the model's API key"


def _url_fix(target: ModelTarget) -> str:
    if target.alias is not None:
        return f"fix models.{target.alias}.base_url"
    return "fix the base URL (OPENAI_BASE_URL, or base_url in a [models.NAME] table)"


def model_failure(exc: BaseException, target: ModelTarget) -> ModelFailure | None:
    """The one line and exit code for a failed model request; ``None`` when ``exc`` is not a
    model request's failure (the caller describes it its own way)."""
    if isinstance(exc, EmptyAnswers):
        line = (
            f"{_where(target, None)} returned no text and no tool call {exc.count} times in a "
            "row; check that the server's chat template supports tool calls, or raise "
            f"{_setting(target, 'empty_retries')}"
        )
        return _done("empty", line, EXIT_FAILED)
    if isinstance(exc, ContextExhausted):  # its message says what was tried (_compacting.py)
        return _done("context_exhausted", str(exc), EXIT_FAILED)
    if not isinstance(exc, ModelAPIError):
        return None
    where = _where(target, exc.model_name)
    if isinstance(exc, ModelHTTPError):
        status = exc.status_code
        said = _body_message(exc.body)
        said_part = f": {said}" if said else ""
        if status == 401 or (isinstance(exc, ModelAuthenticationError) and status != 403):
            line = f"{where} rejected the API key (HTTP {status}){said_part}; {_key_fix(target)}"
            return _done("auth", line, EXIT_CONFIG)
        if status == 403:
            holder = f" in {target.key_env}" if target.key_env else ""
            line = (
                f"{where} refused access (HTTP 403){said_part}; put a key that may call this "
                f"model{holder}, or use another model"
            )
            return _done("forbidden", line, EXIT_CONFIG)
        if status == 404 or isinstance(exc, ModelNotFoundError):
            line = (
                f"{where} was not found (HTTP {status}){said_part}; check the model name "
                f"({exc.model_name!r}) and that the base URL ends where the server "
                f"serves /chat/completions (often .../v1): {_url_fix(target)}"
            )
            return _done("not_found", line, EXIT_CONFIG)
        if status == 429 or isinstance(exc, ModelRateLimitError):
            line = (
                f"{where} is rate limited (HTTP 429) and still was after the retries{said_part}; "
                "wait and run again, or lower the model's concurrency"
            )
            return _done("rate_limit", line, EXIT_FAILED)
        if status >= 500:
            line = (
                f"{where} failed with HTTP {status} after the retries{said_part}; the server "
                "had a problem: check its log or run again later"
            )
            return _done("server", line, EXIT_FAILED)
        line = f"{where} rejected the request (HTTP {status}){said_part}"
        return _done("rejected", line, EXIT_FAILED)
    if isinstance(exc, ModelConnectionError | ModelRequestTimeout):
        kind = _transport_kind(exc)
        url = public_url(target.url) or "the provider"
        name = f"model {target.name}"
        if kind == "tls":
            line = (
                f"the TLS handshake with {url} failed ({name}); if the server speaks plain HTTP "
                f"use an http:// URL, else check its certificate: {_url_fix(target)}"
            )
        elif kind == "dns":
            line = (
                f"the host of {url} could not be resolved ({name}); check the host name: "
                f"{_url_fix(target)}"
            )
        elif kind == "refused":
            line = (
                f"{url} refused the connection ({name}); start the model server, or "
                f"{_url_fix(target)}"
            )
        elif kind == "timeout":
            line = (
                f"{url} did not answer in time ({name}); check that the server is up, or "
                f"raise {_setting(target, 'request_timeout')}"
            )
        else:
            line = f"the connection to {url} failed ({name}); check that the server is up"
        return _done(kind, line, EXIT_FAILED)
    said = _body_message(exc.body) or _body_message(exc.message)
    return _done("other", f"{where} failed{': ' + said if said else ''}", EXIT_FAILED)


def _setting(target: ModelTarget, key: str) -> str:
    if target.alias is not None:
        return f"models.{target.alias}.{key}"
    return f"{key} in a [models.NAME] table for this model"


def _done(kind: str, line: str, exit_code: int) -> ModelFailure:
    return ModelFailure(kind, scrub_text(" ".join(line.split())), exit_code)
