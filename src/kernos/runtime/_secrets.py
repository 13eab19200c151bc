"""The one scrubber: every secret value kernos knows, removed from every text that leaves it.

Values join a process-wide registry where kernos learns them, by where they come from, never by
how they look: API keys read from the environment or ``api_key_env`` (model resolution), a
``${ENV}`` value expanded into a field of ``kernos.toml`` that holds a credential
(:func:`secret_field`: a key, token, password, secret or header) or from a variable whose name says
it is one (:func:`secret_env_name`), the credentials and path and query tokens of configured URLs,
and each channel's declared secrets. ``${DEPLOY_ENV}`` in ``instructions`` or ``${HOME}`` in a path
stays readable. :func:`scrub_text`
replaces every registered value (longest first, so a key that contains another is removed whole)
and, for values kernos never saw, every secret *shape* (``sk-…``, ``gsk_…``, ``Bearer …``,
``xox…``, ``token=…`` in a URL). Values shorter than :data:`MIN_SECRET_LENGTH` are ignored: a
5-character "secret" would shred ordinary words.

Receipts, tool results, log lines (:func:`install_log_scrubber`), store rows (``redact``),
reports and cassettes all go through :func:`scrub_text`, so there is one rule to get right.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

if TYPE_CHECKING:
    from kernos.boundary import ToolResult


REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 6
"""Registered values shorter than this are not scrubbed by value (shape rules still apply)."""

SECRET_SHAPES = re.compile(
    r"(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{8,}"
    r"|gsk_[A-Za-z0-9]{8,}"
    r"|(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{8,}"
    r"|xox[abposr]-[A-Za-z0-9-]{8,}"
    r"|AIza[0-9A-Za-z_-]{20,}"
    r"|(?<![A-Za-z0-9])AKIA[0-9A-Z]{16}"
    r"|Bearer\s+[A-Za-z0-9._~+/=-]{8,})"
)
"""Secret shapes scrubbed even when kernos never saw the value: OpenAI/Anthropic ``sk-…``, Groq
``gsk_…``, GitHub ``ghp_…``, Slack ``xox…``, Google ``AIza…``, AWS ``AKIA…``, ``Bearer …``."""

_URL_SECRET_PARAM = re.compile(
    r"([?&](?:[A-Za-z0-9_.-]*(?:token|key|secret|password|passwd|sig|signature|auth|code))=)"
    r"[^&\s#\"'<>]+",
    re.I,
)
"""``?token=…`` / ``&api_key=…`` in any URL: the value is a credential whatever its shape."""

_HOSTNAME = re.compile(r"^(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|\[[0-9A-Fa-f:.]+\])$")
_ENV_SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|ACCESS_KEY)$", re.I)
#: words of a config key that say its value is a credential (``api_key``, ``headers.X-Trace``,
#: ``smtp_password``, ``env.GITHUB_TOKEN``, ``Authorization``)
_SECRET_FIELD_WORDS = frozenset(
    {
        "apikey", "auth", "authorization", "bearer", "cookie", "credential", "credentials",
        "header", "headers", "key", "pass", "passphrase", "passwd", "password", "pwd", "secret",
        "token",
    }
)  # fmt: skip
_KEY_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

_lock = threading.Lock()
_values: set[str] = set()
_pattern: re.Pattern[str] | None = None


def register_secrets(*values: str | None) -> None:
    """Add values to the scrubber; blanks and values under ``MIN_SECRET_LENGTH`` are skipped."""
    global _pattern
    fresh = {
        v.strip() for v in values if isinstance(v, str) and len(v.strip()) >= MIN_SECRET_LENGTH
    }
    with _lock:
        if fresh <= _values:
            return
        _values.update(fresh)
        _pattern = None


def known_secrets() -> frozenset[str]:
    """The registered values (for tests and diagnostics; never print them)."""
    with _lock:
        return frozenset(_values)


def forget_secrets() -> None:
    """Empty the registry (tests isolate themselves with this)."""
    global _pattern
    with _lock:
        _values.clear()
        _pattern = None


def _compiled() -> re.Pattern[str] | None:
    global _pattern
    with _lock:
        if _pattern is None and _values:
            ordered = sorted(_values, key=lambda v: (-len(v), v))
            _pattern = re.compile("|".join(re.escape(v) for v in ordered))
        return _pattern


def scrub_text(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with every known secret value and every secret shape replaced by ``[redacted]``.

    Args:
        text: any text bound for a person, a model, a log, a row, a report or a cassette.
        extra: more values to remove from this text only (a channel's own secrets, say).
    """
    if not text:
        return text
    local = sorted(
        {v for v in extra if isinstance(v, str) and len(v) >= 4 and v in text},
        key=len,
        reverse=True,
    )
    for value in local:
        text = text.replace(value, REDACTED)
    pattern = _compiled()
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    text = SECRET_SHAPES.sub(REDACTED, text)
    return _URL_SECRET_PARAM.sub(lambda m: m.group(1) + REDACTED, text)


def scrub_value(value: Any) -> Any:
    """:func:`scrub_text` over every string inside dicts, lists and tuples (keys too)."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {scrub_value(k): scrub_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_value(v) for v in value]
    return value


_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|authorization|passwd)", re.I)


def redact(value: Any) -> Any:
    """Replace secret values with ``[redacted]``: a value under a secret-looking key, and every
    secret the one scrubber knows by value or by shape (:func:`scrub_text`)."""
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(k, str) and _SECRET_KEY.search(k) else redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return scrub_text(value)
    return value


def scrub_result(result: ToolResult) -> ToolResult:
    """A tool result with its text and details scrubbed (what the model and the store see)."""
    text = scrub_text(result.text)
    details = scrub_value(result.details)
    repairs = result.repairs
    if repairs:  # a receipt shows what was sent: a secret the model sent is scrubbed there too
        # a result with repairs came through the boundary, loaded already; the commands
        # that only read the store (and scrub) never load it (tests/test_startup.py)
        from kernos.boundary import repairs_data, repairs_from_data

        plain = repairs_data(repairs)
        scrubbed = scrub_value(plain)
        if scrubbed != plain:
            repairs = repairs_from_data(scrubbed)
    if text == result.text and details == result.details and repairs is result.repairs:
        return result
    return replace(result, text=text, details=details, repairs=repairs)


def _token_like(piece: str) -> bool:
    """A URL piece that reads like a credential rather than a word (``services``, ``hooks``)."""
    if len(piece) < MIN_SECRET_LENGTH:
        return False
    if len(piece) >= 20:
        return True
    return any(c.isdigit() or c.isupper() for c in piece) or not piece.isalpha()


def url_secrets(*urls: str | None) -> tuple[str, ...]:
    """The secret parts of URLs: each whole URL, its path-and-query, the user and password,
    token-like path segments (``/hooks/T000/B000/XXXX`` → ``XXXX``), every query value, and the
    host slot of non-HTTP URLs (Apprise puts tokens there: ``tgram://BOTTOKEN/CHAT``).

    Longest first; values too short to scrub safely are left out.
    """
    out: set[str] = set()
    for url in urls:
        if not url or not isinstance(url, str):
            continue
        url = url.strip()
        found = _one_url_secrets(url)
        if found:  # a URL with nothing secret in it (``http://host/hook``) stays readable
            out.update((url, *found))
    return tuple(sorted(out, key=lambda v: (-len(v), v)))


def _one_url_secrets(url: str) -> set[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or not parts.scheme or not parts.netloc:
        return {p for p in re.split(r"[/:@?&=#,]+", url) if _token_like(p)}
    out: set[str] = set()
    userinfo, _, hostport = parts.netloc.rpartition("@")
    if userinfo:
        user, _, password = userinfo.partition(":")
        out.update({user, unquote(user), password, unquote(password)})
    if parts.scheme.lower() not in ("http", "https"):
        for piece in re.split(r"[:,]", hostport):
            if not _HOSTNAME.match(piece) and not (piece.isdigit() and len(piece) <= 5):
                out.add(piece)
    for segment in parts.path.split("/"):
        out.update(piece for piece in {segment, unquote(segment)} if _token_like(piece))
    out.update(value for _name, value in parse_qsl(parts.query))
    out = {v for v in out if len(v) >= MIN_SECRET_LENGTH}
    if out:
        tail = url[url.find(parts.netloc) + len(parts.netloc) :]
        if len(tail) >= MIN_SECRET_LENGTH:
            out.add(tail)
    return out


def register_url_secrets(*urls: str | None) -> None:
    """:func:`register_secrets` over :func:`url_secrets`."""
    register_secrets(*url_secrets(*urls))


def secret_env_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (``*_API_KEY``,
    ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD``, ``*_ACCESS_KEY``)."""
    return _ENV_SECRET_NAME.search(name) is not None


def secret_field(key: str) -> bool:
    """Whether a config key (``mcp.docs.headers.Authorization``, ``channels.qq.token``,
    ``mcp.git.args[2]``) names a field that holds a credential: some part of it, split into
    words (``api_key``, ``apiKey``, ``X-Api-Key``), is a key, token, password, secret, auth or
    header word. Pure."""
    for part in re.split(r"[.\[\]]+", key):
        if any(word.lower() in _SECRET_FIELD_WORDS for word in _KEY_WORD.findall(part)):
            return True
    return False


def register_env_secrets(environ: dict[str, str] | None = None) -> None:
    """Register environment values whose names say they are credentials (``*_API_KEY``,
    ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD``): the providers pydantic-ai resolves read them."""
    env = os.environ if environ is None else environ
    register_secrets(*(value for name, value in env.items() if secret_env_name(name)))


# -- logging ---------------------------------------------------------------------------------


def _scrub_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a bad format string stays the logging module's problem
        return
    record.msg = scrub_text(message)
    record.args = ()
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = scrub_text(record.exc_text)
    if record.stack_info:
        record.stack_info = scrub_text(record.stack_info)


class SecretsFilter(logging.Filter):
    """A logging filter that scrubs a record's message, arguments and traceback in place."""

    def filter(self, record: logging.LogRecord) -> bool:
        _scrub_record(record)
        return True


_installed = False


def install_log_scrubber() -> None:
    """Scrub every log record as it is made, whichever logger or handler it goes to.

    A filter on the ``kernos`` logger would miss records of its children (``kernos.tasks``): a
    logger's filters do not apply to records propagated from below. The record factory sees all
    of them, once. Idempotent.
    """
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        _scrub_record(record)
        return record

    logging.setLogRecordFactory(factory)
