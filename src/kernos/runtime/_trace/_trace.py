"""OpenTelemetry spans for runs, prompts, tool calls and children, exported over OTLP/HTTP.

Tracing is on when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set and ``OTEL_SDK_DISABLED`` is not ``true``; every
other standard variable (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``…) is read by the SDK
itself. When it is off, :func:`span` returns one shared do-nothing context manager and the
OpenTelemetry SDK and exporter are never imported.

kernos's own spans are ``kernos.run`` (``kernos run``), ``kernos.prompt`` (one per
``Session.prompt``), ``kernos.tool_call`` (every tool call, at the one adapter) and ``kernos.task``
(one child run, linked to the tool call that spawned or revived it); model requests come from
pydantic-ai's instrumentation on the same tracer provider. Everything exported, pydantic-ai's
message content included, goes through the one secret scrubber first.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kernos.runtime._secrets import scrub_text

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Tracer

log = logging.getLogger("kernos.trace")

#: the variables that turn tracing on (the exporter reads them too)
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

#: ``service.name`` when neither ``OTEL_SERVICE_NAME`` nor ``OTEL_RESOURCE_ATTRIBUTES`` names one
DEFAULT_SERVICE_NAME = "kernos"

#: the prefix every keyword attribute of :func:`span` gets (``tool=`` → ``kernos.tool``)
ATTRIBUTE_PREFIX = "kernos."


def tracing_requested(environ: Mapping[str, str]) -> bool:
    """Whether these environment variables ask for traces. Pure.

    An OTLP endpoint must be set (not blank); ``OTEL_SDK_DISABLED=true`` and
    ``OTEL_TRACES_EXPORTER=none`` turn it off again, as for every OpenTelemetry SDK.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def capture_content(environ: Mapping[str, str]) -> bool:
    """Whether prompts and completions go into the model-request spans (pydantic-ai's default:
    yes); the GenAI convention's ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=false``
    turns it off. Pure."""
    value = environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower()
    return value not in ("false", "0", "no")


def attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword attributes as OpenTelemetry attributes: each key prefixed ``kernos.``; ``None``
    dropped; booleans, numbers and text kept; anything else as its text. Pure."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if not isinstance(value, bool | int | float | str):
            value = str(value)
        out[ATTRIBUTE_PREFIX + key] = value
    return out


class _NoSpan:
    """What :func:`span` returns while tracing is off: enters and leaves, records nothing."""

    __slots__ = ()

    #: whether attributes set on it are kept (a caller skips computing them when not)
    recording = False

    def set(self, **values: Any) -> None:
        """Add attributes to the span (nothing to add them to here)."""

    def set_genai(self, values: Mapping[str, Any]) -> None:
        """Add convention-named attributes (nothing to add them to here)."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    async def __aenter__(self) -> _NoSpan:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None


_NO_SPAN = _NoSpan()


class _Span:
    """One live span, current while the ``with`` (or ``async with``) block runs."""

    __slots__ = ("_attributes", "_context", "_link", "_name", "_span", "_tracer")

    #: whether attributes set on it are kept (:attr:`_NoSpan.recording`)
    recording = True

    def __init__(self, tracer: Tracer, name: str, attributes: dict[str, Any], link: bool) -> None:
        self._tracer = tracer
        self._name = name
        self._attributes = attributes
        self._link = link
        self._context: Any = None
        self._span: Any = None

    def set(self, **values: Any) -> None:
        """Add attributes (``kernos.``-prefixed, like :func:`span`'s) to the running span."""
        if self._span is not None:
            self._span.set_attributes(attributes(values))

    def set_genai(self, values: Mapping[str, Any]) -> None:
        """Add attributes as named (the GenAI convention's ``gen_ai.*``); ``None`` dropped."""
        if self._span is not None:
            self._span.set_attributes({k: v for k, v in values.items() if v is not None})

    def __enter__(self) -> _Span:
        from opentelemetry import trace

        links: Sequence[Any] = ()
        if self._link:
            current = trace.get_current_span().get_span_context()
            if current.is_valid:
                links = [trace.Link(current, {"kernos.link": "spawned_by"})]
        self._context = self._tracer.start_as_current_span(
            self._name, attributes=self._attributes, links=links
        )
        self._span = self._context.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        context, self._context, self._span = self._context, None, None
        if context is not None:
            context.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> _Span:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


#: ``None``: not decided yet; ``False``: tracing is off; else the tracer kernos's spans use
_tracer: Tracer | bool | None = None
_provider: TracerProvider | None = None


def span(name: str, /, *, link: bool = False, **values: Any) -> _Span | _NoSpan:
    """A span around a ``with`` (or ``async with``) block; a shared no-op when tracing is off.

    Each keyword becomes the attribute ``kernos.<keyword>``; :meth:`_Span.set` adds more while
    the block runs. An exception leaving the block is recorded on the span (status error).

    Args:
        name: the span name (``kernos.run``, ``kernos.prompt``, ``kernos.tool_call``,
            ``kernos.task``).
        link: also link the span to the span current when it starts (a child run and the tool
            call that spawned it).
    """
    tracer = _tracer if _tracer is not None else _configure(os.environ)
    if isinstance(tracer, bool):
        return _NO_SPAN
    return _Span(tracer, name, attributes(values), link)


def chat_span(model: str, messages: Any) -> _Span | _NoSpan:
    """A model request of the lean engine as the GenAI convention's ``chat MODEL`` span (what
    pydantic-ai's instrumentation makes for its engine); ``messages`` (the request's messages,
    serialized only when tracing and content capture are on) become ``gen_ai.input.messages``.
    Add the answer's figures with :meth:`_Span.set_genai`."""
    tracer = _tracer if _tracer is not None else _configure(os.environ)
    if isinstance(tracer, bool):
        return _NO_SPAN
    values: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "openai",
        "gen_ai.request.model": model,
    }
    if capture_content(os.environ):
        values["gen_ai.input.messages"] = json.dumps(messages, ensure_ascii=False, default=str)
    return _Span(tracer, f"chat {model}", values, False)


def enabled() -> bool:
    """Whether this process exports spans (decided at the first :func:`span`)."""
    tracer = _tracer if _tracer is not None else _configure(os.environ)
    return tracer is not False


def flush(timeout_millis: int = 5000) -> None:
    """Export every finished span now (also done at interpreter exit, by the SDK)."""
    if _provider is not None:
        _provider.force_flush(timeout_millis)


def _configure(environ: Mapping[str, str]) -> Tracer | bool:
    """Decide once per process: set up the provider and exporter, or stay off."""
    global _tracer, _provider
    if not tracing_requested(environ):
        _tracer = False
        return False
    try:
        _provider = _make_provider()
        _instrument_pydantic_ai(_provider, capture_content(environ))
    except Exception as exc:  # a broken exporter setting must not stop the run
        log.warning("tracing is off: the OpenTelemetry exporter could not start: %s", exc)
        _tracer = False
        return False
    from kernos import __version__

    tracer = _provider.get_tracer("kernos", __version__)
    _tracer = tracer
    return tracer


def _make_provider() -> TracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    # shutdown_on_exit: the SDK flushes and stops the exporter at interpreter exit (Ctrl-C too)
    provider = TracerProvider(resource=resource, shutdown_on_exit=True)
    provider.add_span_processor(BatchSpanProcessor(scrubbing_exporter(OTLPSpanExporter())))
    return provider


def _instrument_pydantic_ai(provider: TracerProvider, include_content: bool) -> None:
    """Model requests of every pydantic-ai agent become spans on kernos's provider, unless the
    application already chose its own instrumentation."""
    from pydantic_ai import Agent, InstrumentationSettings

    if getattr(Agent, "_instrument_default", False) is not False:
        return
    Agent.instrument_all(
        InstrumentationSettings(tracer_provider=provider, include_content=include_content)
    )


def _scrub_attributes(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, str):
            value = scrub_text(value)
        elif isinstance(value, tuple | list):
            value = tuple(scrub_text(v) if isinstance(v, str) else v for v in value)
        out[key] = value
    return out


def scrubbed(span: ReadableSpan) -> ReadableSpan:
    """A copy of a finished span with every secret removed from its name, attributes, event
    attributes and status text (pydantic-ai's prompts and completions included)."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import Status

    status = span.status
    if status.description:
        status = Status(status.status_code, scrub_text(status.description))
    return ReadableSpan(
        name=scrub_text(span.name),
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_scrub_attributes(span.attributes),
        events=[Event(e.name, _scrub_attributes(e.attributes), e.timestamp) for e in span.events],
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def scrubbing_exporter(inner: SpanExporter) -> SpanExporter:
    """``inner`` wrapped so that every span is :func:`scrubbed` before it leaves the process."""
    from opentelemetry.sdk.trace.export import SpanExporter

    class ScrubbingExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return inner.export([scrubbed(s) for s in spans])

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return inner.force_flush(timeout_millis)

    return ScrubbingExporter()
