"""Python functions as tools: the signature is the schema, the docstring the description.

``function_tool(fn)`` builds a pydantic model from ``fn``'s parameters (``pydantic.create_model``),
takes the description and each parameter's description from a Google-style docstring (griffe, which
pydantic-ai already depends on), and derives ``prepare`` from the signature so provider padding in
an optional parameter becomes absence before validation. Sync functions run in a thread; async ones
are awaited. A function that raises is the boundary's ``tool_failed``; one that raises
:class:`~kernos.boundary.ToolError` is a coded semantic error.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import pydantic_core
from griffe import Docstring, DocstringSectionKind, DocstringSectionParameters, GoogleOptions
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model

from kernos.boundary import (
    ToolContext,
    ToolResult,
    ToolSpec,
    boolean_flag,
    is_blank,
    schema_prepare,
)

log = logging.getLogger("kernos.tools")

_EMPTY = inspect.Parameter.empty


def doc_descriptions(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The docstring's text sections and its ``Args:`` descriptions by parameter name."""
    doc = inspect.getdoc(fn)
    if not doc:
        return "", {}
    sections = Docstring(
        doc, lineno=1, parser="google", parser_options=GoogleOptions(warnings=False)
    ).parse()
    params: dict[str, str] = {}
    text: list[str] = []
    for section in sections:
        if isinstance(section, DocstringSectionParameters):
            for param in section.value:
                params.setdefault(param.name.lstrip("*"), param.description)
        elif section.kind is DocstringSectionKind.text:
            text.append(str(section.value))
    return "\n\n".join(t.strip() for t in text if t.strip()), params


def _allows(annotation: Any, kind: type) -> bool:
    """True when ``annotation`` is ``kind`` or a union containing it."""
    if annotation is kind:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _allows(typing.get_args(annotation)[0], kind)
    if origin is Union or origin is types.UnionType:
        return any(_allows(a, kind) for a in typing.get_args(annotation))
    return False


def _allows_none(annotation: Any) -> bool:
    return annotation is Any or annotation is None or _allows(annotation, type(None))


@dataclass(frozen=True)
class _Param:
    name: str
    annotation: Any
    required: bool
    default: Any
    positional_only: bool


class _Preparer:
    """``prepare`` for a function: padding in an optional parameter becomes absence.

    Required parameters are never stripped. For an optional one: ``null`` (unless its type allows
    ``None`` and its default is not ``None``), blank strings, ``[]`` and ``{}`` are absent;
    ``"true"``/``"false"`` become booleans for a ``bool``; a null word (``"null"``, ``"none"``) is
    absent when the parameter's type rejects it. Keys the function does not take are dropped.

    ``coerce`` then runs on what is left: the ``prepare`` derived from the model's JSON schema
    (:func:`~kernos.boundary.schema_prepare`), so text sent for a parameter that takes no string
    (``"10"`` for an ``int``, ``'["a"]'`` for a ``list[str]``) becomes the value it spells, as for
    MCP tools. pydantic's lax mode reads numeric text but never decodes JSON text for a list.
    """

    def __init__(
        self, params: list[_Param], coerce: Callable[[Any], dict[str, Any]] | None = None
    ) -> None:
        self._params = {p.name: p for p in params}
        self._adapters: dict[str, TypeAdapter[Any]] = {}
        self._coerce = coerce

    def _rejects(self, param: _Param, value: str) -> bool:
        adapter = self._adapters.get(param.name)
        if adapter is None:
            adapter = self._adapters[param.name] = TypeAdapter(param.annotation)
        try:
            adapter.validate_python(value)
        except ValidationError:
            return True
        return False

    def __call__(self, raw: Any) -> dict[str, Any]:
        if not isinstance(raw, dict):
            return {}
        out: dict[str, Any] = {}
        for key, value in raw.items():
            param = self._params.get(key)
            if param is None:
                continue
            if param.required:
                out[key] = value
                continue
            if value is None:
                if _allows_none(param.annotation) and param.default is not None:
                    out[key] = value
                continue
            if is_blank(value):
                continue
            if _allows(param.annotation, bool) and not isinstance(value, bool):
                flag = boolean_flag(value)
                if flag is not None:
                    out[key] = flag
                    continue
            if (
                isinstance(value, str)
                and value.strip().casefold() in ("null", "none", "undefined", "nil")
                and self._rejects(param, value)
            ):
                continue
            out[key] = value
        return out if self._coerce is None else self._coerce(out)


def _signature(fn: Callable[..., Any]) -> tuple[list[_Param], str | None]:
    """The parameters a model fills, and the name of the one that receives the ToolContext."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise TypeError(f"cannot read the type hints of {_qualname(fn)}: {exc}") from None
    params: list[_Param] = []
    context: str | None = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(
                f"{_qualname(fn)} takes *{param.name}; a tool function needs named parameters only"
            )
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            context = param.name
            continue
        params.append(
            _Param(
                param.name,
                annotation,
                param.default is _EMPTY,
                None if param.default is _EMPTY else param.default,
                param.kind is param.POSITIONAL_ONLY,
            )
        )
    return params, context


def _schema_coercion(model: type[BaseModel]) -> Callable[[Any], dict[str, Any]] | None:
    """The schema-derived ``prepare`` for ``model``; ``None`` when it has no JSON schema."""
    try:
        return schema_prepare(model.model_json_schema())
    except Exception:  # a type pydantic validates but cannot describe: validation alone judges
        log.warning("no JSON schema for %s; its arguments are not coerced", model.__name__)
        return None


def _qualname(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}:{getattr(fn, '__qualname__', repr(fn))}"


def _as_result(value: Any) -> ToolResult | str:
    if isinstance(value, ToolResult | str):
        return value
    if value is None:
        return "done"
    try:
        return pydantic_core.to_json(value, fallback=str).decode()
    except Exception:
        return str(value)


def function_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    max_retries: int = 3,
) -> ToolSpec[Any]:
    """A :class:`~kernos.boundary.ToolSpec` for a Python function.

    Args:
        fn: a sync or async function with named, annotated parameters. A parameter annotated
            ``ToolContext`` receives the call context and is not shown to the model.
        name: the tool name (default: the function's ``__name__``).
        description: what the model reads (default: the docstring's text).
        max_retries: schema failures the model may make in a row.

    Raises:
        TypeError: ``fn`` is not callable, takes ``*args``/``**kwargs`` or has unreadable hints.
        ValueError: the name is not a valid tool name.
    """
    if not callable(fn):
        raise TypeError(f"{fn!r} is not callable")
    tool_name: str = name or str(getattr(fn, "__name__", ""))
    params, context = _signature(fn)
    summary, docs = doc_descriptions(fn)
    fields: dict[str, Any] = {}
    for param in params:
        info = (
            Field(description=docs.get(param.name))
            if param.required
            else Field(default=param.default, description=docs.get(param.name))
        )
        fields[param.name] = (param.annotation, info)
    try:
        model: type[BaseModel] = create_model(
            f"{tool_name or 'tool'}_args",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
    except Exception as exc:
        raise TypeError(f"{_qualname(fn)}: its parameters cannot be a tool schema: {exc}") from None
    is_async = inspect.iscoroutinefunction(fn)
    positional = [p.name for p in params if p.positional_only]
    keyword = [p.name for p in params if not p.positional_only]

    async def execute(args: BaseModel, ctx: ToolContext) -> ToolResult | str:
        call_args = [getattr(args, n) for n in positional]
        call_kwargs = {n: getattr(args, n) for n in keyword}
        if context is not None:
            call_kwargs[context] = ctx
        if is_async:
            value = await fn(*call_args, **call_kwargs)
        else:
            value = await asyncio.to_thread(fn, *call_args, **call_kwargs)
        return _as_result(value)

    return ToolSpec(
        name=tool_name,
        description=(description or summary or f"Calls {_qualname(fn)}.").strip(),
        params=model,
        execute=execute,
        prepare=_Preparer(params, _schema_coercion(model)),
        max_retries=max_retries,
    )
