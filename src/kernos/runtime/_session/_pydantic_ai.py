"""Library use: kernos's tools on a program's own pydantic-ai ``Agent``, and kernos's padding
normalization around any pydantic-ai toolset.

* :func:`as_pydantic_ai` offers kernos tools (a :class:`kernos.runtime.Session`'s, whatever
  toolsets filled it — tasks, output, MCP, functions — or plain ``ToolSpec``\\s) as a pydantic-ai
  toolset whose every call runs through :func:`kernos.boundary.call_tool`: padding normalized,
  coded errors, the retry budget, secrets scrubbed. Background completions (task notices) are
  queued on the session: ``session.take_queued()`` / ``await session.wait_for_messages()``.
* :func:`normalized` wraps any pydantic-ai toolset: each tool's arguments go through the
  ``prepare`` derived from its JSON schema (:func:`kernos.boundary.schema_prepare`) before the
  toolset's own validation.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from kernos.boundary import ToolResult, ToolSpec, schema_prepare
from kernos.runtime._session._toolset import KernosToolset


@dataclass
class _SpecHost:
    """What :class:`KernosToolset` needs of a session, for a plain list of specs."""

    tools: dict[str, ToolSpec[Any]]
    agent: str = "main"
    session_id: str = "library"
    store: Any = None
    retries: int | None = None
    workspace: Any = None
    results: dict[str, ToolResult] = field(default_factory=dict)
    #: no run budget of kernos's: the per-turn tool-call cap is the default one
    budget: Any = None
    #: the caller's agent has a model of its own, which kernos does not see: receipts name none
    model: Any = field(default_factory=lambda: SimpleNamespace(model_name=None))

    def emit(self, kind: str, **data: Any) -> None:
        return None

    def emit_result(self, name: str, result: ToolResult, call_id: str | None) -> None:
        return None


def as_pydantic_ai(
    source: Any,
    *,
    agent: str = "main",
    on_result: Callable[[str, ToolResult], None] | None = None,
) -> AbstractToolset[Any]:
    """kernos tools as a pydantic-ai toolset for your own ``Agent(toolsets=[...])``.

    Args:
        source: a :class:`kernos.runtime.Session` (its tools as they are at each step, so tools
            its toolsets add later are offered too), or an iterable of ``ToolSpec``.
        agent: the agent name tool contexts carry (plain specs only).
        on_result: called with ``(tool_call_id, ToolResult)`` after each call.
    """
    if isinstance(source, Iterable) and not hasattr(source, "session_id"):
        host: Any = _SpecHost({spec.name: spec for spec in source}, agent=agent)
    else:
        host = source
    return KernosToolset(host, on_result or (lambda _id, _result: None))


class _Preparing:
    """An ``args_validator`` that runs a schema-derived ``prepare`` before the tool's own one."""

    def __init__(self, prepare: Callable[[Any], dict[str, Any]], inner: Any) -> None:
        self.prepare = prepare
        self.inner = inner

    def validate_json(self, input: str | bytes | bytearray, **kwargs: Any) -> Any:
        try:
            value = json.loads(input) if input and str(input).strip() else {}
        except ValueError:
            return self.inner.validate_json(input, **kwargs)  # its own error, as before
        return self.inner.validate_python(self.prepare(value), **kwargs)

    def validate_python(self, input: Any, **kwargs: Any) -> Any:
        return self.inner.validate_python(self.prepare(input), **kwargs)


@dataclass
class NormalizedToolset(WrapperToolset[Any]):
    """A pydantic-ai toolset whose tools get kernos's padding normalization (see
    :func:`normalized`)."""

    _prepares: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await super().get_tools(ctx)
        wrapped: dict[str, ToolsetTool[Any]] = {}
        for name, tool in tools.items():
            schema = tool.tool_def.parameters_json_schema
            key = json.dumps(schema, sort_keys=True, default=str)
            cached = self._prepares.get(name)
            if cached is None or cached[0] != key:
                cached = self._prepares[name] = (key, schema_prepare(schema))
            wrapped[name] = dataclasses.replace(
                tool, args_validator=_Preparing(cached[1], tool.args_validator)
            )
        return wrapped


def normalized(toolset: AbstractToolset[Any]) -> NormalizedToolset:
    """Wrap any pydantic-ai toolset (an MCP server, a ``FunctionToolset``…) so provider padding
    (``""``, ``null``, ``[]``, ``"true"`` for optional fields…) is normalized, by a ``prepare``
    derived from each tool's JSON schema, before the toolset validates and runs the call."""
    return NormalizedToolset(toolset)
