"""The one adapter that carries kernos ``ToolSpec``s into pydantic-ai.

pydantic-ai validates arguments before a tool runs; kernos must run ``prepare`` *before* schema
validation (padding first). So each tool is offered with the spec's JSON schema for the model but
a permissive dict validator for pydantic-ai, and :func:`kernos.boundary.call_tool` runs the real
pipeline. Schema errors become ``ModelRetry`` (counted against the tool's retry budget); semantic
errors are ordinary tool text with the code kept in the session's event log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from kernos.boundary import ToolContext, ToolResult, ToolSpec, call_tool
from kernos.runtime._secrets import scrub_result

if TYPE_CHECKING:
    from kernos.runtime._session import Session

_ANY_DICT = SchemaValidator(core_schema.dict_schema())


class KernosToolset(AbstractToolset[Any]):
    """Offers a session's current tools to pydantic-ai and runs every call through the boundary."""

    def __init__(self, session: Session, on_result: Callable[[str, ToolResult], None]) -> None:
        self._session = session
        self._on_result = on_result

    @property
    def id(self) -> str | None:
        return f"kernos-{self._session.session_id}"

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools: dict[str, ToolsetTool[Any]] = {}
        for spec in self._session.tools.values():
            tools[spec.name] = ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=spec.name,
                    description=spec.description,
                    parameters_json_schema=spec.schema(),
                ),
                max_retries=spec.max_retries,
                args_validator=_ANY_DICT,
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        spec: ToolSpec[Any] = self._session.tools[name]
        self._session.emit("tool_call", name=name, args=tool_args)
        result = await call_tool(
            spec,
            tool_args,
            ToolContext(
                agent=self._session.agent,
                session_id=self._session.session_id,
                tool_call_id=ctx.tool_call_id,
                extras={"session": self._session},
            ),
        )
        result = scrub_result(result)  # the model, the store and the events never see a secret
        self._on_result(ctx.tool_call_id or "", result)
        self._session.emit("tool_result", name=name, result=result)
        if result.stage == "schema":
            raise ModelRetry(result.text)
        return result.text
