"""The tool-call pipeline every kernos tool goes through.

``raw args ─prepare→ dict ─schema→ params ─validate→ ok | ToolError ─execute→ ToolResult``

Errors come in three families (the tree in :mod:`kernos.errors`):

* **Model errors** — the arguments are wrong. They never raise out of :func:`call_tool`; the model
  gets a :class:`ToolResult` with ``is_error=True`` and a ``code`` in ``details`` so it can retry:
  ``invalid_json`` (unparseable argument text), ``invalid_arguments`` (schema), or the tool's own
  semantic code from :class:`ToolError`.
* **Developer mistakes** — a broken ``ToolSpec`` (not a pydantic model, a bad name): raised early as
  ``TypeError``/``ValueError`` when the spec is built.
* **Runtime failures** inside ``execute`` — returned as ``tool_failed`` with the exception text, so
  one broken tool never takes the whole session down.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from kernos.boundary._repairs import Repair, find_repairs
from kernos.boundary._text import clean_value, nesting_depth
from kernos.errors import ToolError as ToolError

P = TypeVar("P", bound=BaseModel)

logger = logging.getLogger("kernos.boundary")

Stage = Literal["json", "schema", "semantic", "execute"]

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

#: arguments nested deeper than this are refused before any stage walks them (Python's JSON parser
#: and encoder recurse; a model can send 10,000 levels in 20 KB of text)
MAX_ARGUMENT_DEPTH = 100


@dataclass(frozen=True)
class ToolResult:
    """What a call produced: ``text`` for the model, ``details`` for logs, UIs and the store,
    ``repairs`` (what ``prepare`` changed in the arguments sent) for people; never the model.
    Two results are equal when the model reads the same: ``repairs`` is not compared."""

    text: str
    details: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False
    repairs: tuple[Repair, ...] = field(default=(), compare=False)

    @property
    def code(self) -> str | None:
        """The error code, when this result is a rejection."""
        code = self.details.get("code")
        return code if isinstance(code, str) else None

    @property
    def stage(self) -> Stage | None:
        """The stage that rejected the call: ``json``, ``schema``, ``semantic`` or ``execute``."""
        stage = self.details.get("stage")
        return stage if stage in ("json", "schema", "semantic", "execute") else None

    @classmethod
    def from_error(
        cls, error: ToolError, *, stage: Stage = "semantic", tool: str = ""
    ) -> ToolResult:
        details = {**error.details, "code": error.code, "stage": stage}
        if tool:
            details["tool"] = tool
        return cls(text=error.message, details=details, is_error=True)


@dataclass
class ToolContext:
    """What ``validate`` and ``execute`` may know about the call besides its arguments.

    The boundary imports nothing of kernos, so the handles are typed loosely here; the runtime
    fills them with its own objects.

    Args:
        agent: the calling agent's name.
        session_id: the calling session's id.
        tool_call_id: the provider's id for this call.
        extras: anything else a caller hands its tools (kept for compatibility).
        session: the calling :class:`kernos.runtime.Session`, when there is one.
        workspace: the :class:`kernos.runtime.WorkspacePolicy` model-supplied paths go through.
        store: the :class:`kernos.runtime.Store`, when the session records to one.
        resolved: what ``validate`` resolved for ``execute`` in this one call (the ``task`` tool
            keeps its resolved batch here, so execute never resolves again).
    """

    agent: str = "main"
    session_id: str | None = None
    tool_call_id: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    session: Any = None
    workspace: Any = None
    store: Any = None
    resolved: Any = None


def _identity_prepare(raw: Any) -> dict[str, Any]:
    return dict(raw) if isinstance(raw, dict) else {}


def _no_validate(params: Any, ctx: ToolContext | None = None) -> ToolError | None:
    return None


Validate = Callable[..., "ToolError | Awaitable[ToolError | None] | None"]


def _takes_context(validate: Callable[..., Any]) -> bool:
    """Whether ``validate`` is ``(params, ctx)`` (new) or ``(params)`` (the old form)."""
    try:
        signature = inspect.signature(validate)
    except (TypeError, ValueError):  # a builtin or C callable: assume the old one-argument form
        return False
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values()):
        return True
    return len(positional) >= 2


Execute = Callable[[P, ToolContext], Awaitable["ToolResult | str"]]


@dataclass(frozen=True)
class ToolSpec(Generic[P]):
    """One tool: its model-facing name, description and schema, and the four pipeline stages.

    Args:
        name: the tool name the model calls (``^[A-Za-z0-9_-]{1,64}$``; providers reject others).
        description: what the model reads about the tool.
        params: the pydantic model the prepared arguments are validated against.
        execute: ``async (params, ctx) -> ToolResult | str``.
        prepare: ``raw -> dict``; turns padding into absence; must not raise.
        validate: ``(params, ctx) -> ToolError | None`` (or awaitable); semantic rules and gates
            after the schema, before ``execute``. The old one-argument form ``params -> ...`` is
            accepted too.
        json_schema: overrides the schema shown to the model (default: from ``params``).
        max_retries: how many schema failures the model may make on this tool in a row.
        receipts: :func:`call_tool` compares what ``prepare`` gave back with what was sent
            and puts each change in ``ToolResult.repairs``; ``False`` for a wrapper whose
            ``prepare`` only packs the arguments for an inner ``call_tool`` (which reports them).
        permission: the tool's own default rule (``"allow"``, ``"ask"`` or ``"deny"``), used when
            no configured permission entry names it; ``None``: the configured ``default``.
        preview: ``(params, ctx) -> str | None``: what a person approving the call is shown
            besides its arguments (the write tools: a unified diff).
    """

    name: str
    description: str
    params: type[P]
    execute: Execute[P]
    prepare: Callable[[Any], dict[str, Any]] = _identity_prepare
    validate: Validate = _no_validate
    json_schema: dict[str, Any] | None = None
    max_retries: int = 3
    receipts: bool = True
    permission: str | None = None
    preview: Callable[[Any, ToolContext], str | None] | None = None

    def __post_init__(self) -> None:
        if not _TOOL_NAME.match(self.name):
            raise ValueError(
                f"tool name {self.name!r} is not valid: use 1-64 letters, digits, '_' or '-'"
            )
        if not (isinstance(self.params, type) and issubclass(self.params, BaseModel)):
            raise TypeError(f"tool {self.name!r}: params must be a pydantic BaseModel subclass")
        if not asyncio.iscoroutinefunction(self.execute):
            raise TypeError(f"tool {self.name!r}: execute must be an async function")
        object.__setattr__(self, "_validate_ctx", _takes_context(self.validate))

    async def check(self, params: P, ctx: ToolContext) -> ToolError | None:
        """The semantic stage: ``validate`` with or without the context, awaited if async."""
        if getattr(self, "_validate_ctx", True):
            outcome = self.validate(params, ctx)
        else:
            outcome = self.validate(params)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        return outcome if isinstance(outcome, ToolError) else None

    def schema(self) -> dict[str, Any]:
        """The JSON schema the model sees for this tool's arguments."""
        if self.json_schema is not None:
            return self.json_schema
        return _model_schema(self.params)


@functools.cache
def _model_schema(params: type[BaseModel]) -> dict[str, Any]:
    # generating a schema costs far more than a model turn's own work; tools are listed every step
    return params.model_json_schema()


def _describe_location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for piece in loc:
        if isinstance(piece, int):
            parts.append(f"[{piece}]")
        else:
            parts.append(f".{piece}" if parts else piece)
    return "".join(parts) or "(arguments)"


def _shown_input(value: Any) -> str:
    """A short JSON rendering of a rejected input; never raises, however deep or odd it is."""
    if nesting_depth(value, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
        return "(a value nested too deeply to show)"
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, TypeError, RecursionError):
        return "(a value that cannot be shown as JSON)"


def schema_error_text(tool: str, error: ValidationError) -> str:
    """The retry message for a schema failure: names the tool, each bad field and the fix."""
    lines = [f"Invalid arguments for tool `{tool}`:"]
    for issue in error.errors(include_url=False):
        where = _describe_location(tuple(issue["loc"]))
        shown = _shown_input(issue.get("input"))
        if len(shown) > 80:
            shown = shown[:77] + "..."
        if issue["type"] == "missing":
            lines.append(f"- `{where}`: required field is missing; add it.")
        elif issue["type"] == "extra_forbidden":
            lines.append(f"- `{where}`: unknown field; remove it.")
        else:
            lines.append(f"- `{where}`: {issue['msg']} (got {shown}).")
    lines.append(f"Fix these fields and call `{tool}` again.")
    return "\n".join(lines)


def decode_arguments(raw_args: Any, tool: str = "") -> Any:
    """The arguments a provider sent, as a value the pipeline can walk.

    Text is parsed as JSON (``None``, ``""`` and bytes as :func:`call_tool` says); every string is
    cleaned of lone surrogates; nesting is bounded by :data:`MAX_ARGUMENT_DEPTH`.

    Raises:
        ToolError: ``invalid_json`` for text that does not parse or nests too deeply,
            ``invalid_arguments`` for a value given nested too deeply; the message is what the
            model reads.
    """
    named = f"tool `{tool}`" if tool else "the tool"
    too_deep = (
        f"The arguments for {named} nest lists or objects more than {MAX_ARGUMENT_DEPTH} levels "
        "deep. Send one JSON object with the tool's fields."
    )
    if isinstance(raw_args, bytes | bytearray):
        raw_args = raw_args.decode("utf-8", errors="replace")
    code = "invalid_arguments"
    if isinstance(raw_args, str):
        code = "invalid_json"
        if not raw_args.strip():
            return {}
        try:
            raw_args = json.loads(raw_args)
        except json.JSONDecodeError as exc:
            raise ToolError(
                code,
                f"The arguments for {named} are not valid JSON ({exc.msg} at position {exc.pos}). "
                "Send one JSON object with the tool's fields.",
            ) from None
        except RecursionError:
            raise ToolError(code, too_deep) from None
    if nesting_depth(raw_args, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
        raise ToolError(code, too_deep)
    return clean_value(raw_args)


async def call_tool(
    spec: ToolSpec[Any], raw_args: Any, ctx: ToolContext | None = None
) -> ToolResult:
    """Run the whole pipeline for one call. Never raises for bad arguments.

    Args:
        spec: the tool.
        raw_args: a dict, or the raw JSON text a provider sent (``None`` and ``""`` mean ``{}``).
        ctx: the call context; a default one is made when omitted.

    The result's ``repairs`` say what ``prepare`` changed (:func:`find_repairs`); its text and
    details are the same with or without them.
    """
    ctx = ctx or ToolContext()
    try:
        raw_args = decode_arguments(raw_args, spec.name)
    except ToolError as exc:
        stage: Stage = "json" if exc.code == "invalid_json" else "schema"
        return ToolResult.from_error(exc, stage=stage, tool=spec.name)
    try:
        prepared = spec.prepare(raw_args)
    except Exception as exc:  # a prepare that raises is a bug; the model still gets an answer
        return ToolResult(
            text=f"Tool `{spec.name}` could not read its arguments: {exc}",
            details={"code": "prepare_failed", "stage": "schema", "tool": spec.name},
            is_error=True,
        )
    result = await _validated_call(spec, prepared, ctx)
    if spec.receipts and not result.repairs:
        repairs = find_repairs(raw_args, prepared)
        if repairs:
            return ToolResult(result.text, result.details, result.is_error, repairs)
    return result


async def _validated_call(spec: ToolSpec[Any], prepared: Any, ctx: ToolContext) -> ToolResult:
    """The stages after ``prepare``: schema, semantic, execute."""
    try:
        params = spec.params.model_validate(prepared)
    except ValidationError as exc:
        return ToolResult(
            text=schema_error_text(spec.name, exc),
            details={
                "code": "invalid_arguments",
                "stage": "schema",
                "tool": spec.name,
                "errors": [
                    {"loc": list(e["loc"]), "type": e["type"], "msg": e["msg"]}
                    for e in exc.errors(include_url=False)
                ],
            },
            is_error=True,
        )
    try:
        rejection = await spec.check(params, ctx)
    except ToolError as exc:  # raising the rejection is the same as returning it
        rejection = exc
    except Exception as exc:  # a validator that crashes is a bug; nothing is executed
        logger.error("tool %s: validate failed", spec.name, exc_info=True)
        return ToolResult(
            text=f"Tool `{spec.name}` failed: {type(exc).__name__}: {exc}",
            details={"code": "tool_failed", "stage": "semantic", "tool": spec.name},
            is_error=True,
        )
    if rejection is not None:
        return ToolResult.from_error(rejection, stage="semantic", tool=spec.name)
    try:
        outcome = await spec.execute(params, ctx)
    except ToolError as exc:
        return ToolResult.from_error(exc, stage="semantic", tool=spec.name)
    except Exception as exc:
        # the traceback goes to the log (kernos.log); the model reads one line
        logger.error("tool %s failed", spec.name, exc_info=True)
        return ToolResult(
            text=f"Tool `{spec.name}` failed: {type(exc).__name__}: {exc}",
            details={"code": "tool_failed", "stage": "execute", "tool": spec.name},
            is_error=True,
        )
    if isinstance(outcome, str):
        return ToolResult(text=outcome)
    return outcome
