"""The one adapter that carries kernos ``ToolSpec``s into pydantic-ai.

pydantic-ai parses and validates arguments before a tool runs; kernos must run ``prepare`` *before*
schema validation (padding first) and answer malformed JSON with its own coded ``invalid_json``
text. So each tool is offered with the spec's JSON schema for the model but a validator that hands
the provider's argument text over untouched, and :func:`kernos.boundary.call_tool` runs the real
pipeline, JSON stage included. JSON and schema errors become ``ModelRetry`` (counted against the
tool's retry budget); semantic errors are ordinary tool text with the code kept in the session's
event log.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Collection
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelResponse
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from kernos.boundary import (
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    call_tool,
    clean_text,
    decode_arguments,
)
from kernos.runtime._models._clean import CUT_OFF
from kernos.runtime._rules._budget import too_many_tool_calls_text, tool_calls_allowed
from kernos.runtime._rules._foreign import delimited
from kernos.runtime._rules._repeats import (
    INVALID_REPEAT,
    REPEAT_LIMIT,
    RepeatGuard,
    call_key,
    repeat_due,
    repeated_call_note,
    repeated_error_text,
    truncated_call_result,
)
from kernos.runtime._secrets import scrub_result
from kernos.runtime._session._session_port import SessionPort
from kernos.runtime._trace._trace import span

_RAW = "__kernos_raw_arguments__"


class _RawArguments:
    """An ``args_validator`` that parses nothing: the boundary's JSON stage does that."""

    def validate_json(self, input: str | bytes | bytearray, **kwargs: Any) -> dict[str, Any]:
        return {_RAW: input}

    def validate_python(self, input: Any, **kwargs: Any) -> dict[str, Any]:
        return {_RAW: input}


_PASS_RAW = _RawArguments()

_LISTED = 20  # tool names an unknown-tool answer lists when none is close


def unknown_tool_result(name: str, known: Collection[str]) -> ToolResult:
    """The coded ``unknown_tool`` answer to a call of a tool the agent does not have: the
    closest names it does have (difflib), else the ones it has."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    if close:
        hint = "The closest tools you have: " + ", ".join(f"`{n}`" for n in close) + "."
    elif known:
        shown = sorted(known)[:_LISTED]
        more = f" (and {len(known) - len(shown)} more)" if len(known) > len(shown) else ""
        hint = "The tools you have: " + ", ".join(f"`{n}`" for n in shown) + more + "."
    else:
        hint = "You have no tools in this session: answer in text."
    return ToolResult.from_error(
        ToolError(
            "unknown_tool",
            f"There is no tool `{name}`. {hint} Call a tool by one of its exact names.",
            {"closest": close},
        ),
        stage="schema",
        tool=name,
    )


class KernosToolset(AbstractToolset[Any]):
    """Offers a session's current tools to pydantic-ai and runs every call through the boundary."""

    def __init__(self, session: SessionPort, on_result: Callable[[str, ToolResult], None]) -> None:
        self._session = session
        self._on_result = on_result
        #: the model answer whose calls are being counted (its run and step) and how many came
        self._turn: tuple[str | None, int] | None = None
        self._turn_calls = 0
        #: identical calls in a row (:mod:`kernos.runtime._rules._repeats`)
        self._repeats = RepeatGuard()

    @property
    def id(self) -> str | None:
        return f"kernos-{self._session.session_id}"

    def _retries(self, spec: ToolSpec[Any]) -> int:
        """The retry budget: config ``retries`` for every tool of a runtime session (built-in,
        function, MCP or kernos's own), else the tool's own ``max_retries``."""
        retries = getattr(self._session, "retries", None)
        return spec.max_retries if retries is None else retries

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
                max_retries=self._retries(spec),
                args_validator=_PASS_RAW,
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        raw = tool_args.get(_RAW) if tool_args.keys() == {_RAW} else tool_args
        limit = tool_calls_allowed(self._session.budget)
        if limit is not None:  # the per-turn cap (the lean loop applies it before dispatch)
            turn = (ctx.run_id, ctx.run_step)
            if turn != self._turn:
                self._turn, self._turn_calls = turn, 0
            self._turn_calls += 1
            if self._turn_calls > limit:
                return too_many_tool_calls_text(limit)
        result = await self.invoke(name, raw, ctx.tool_call_id, cut_off=_cut_off(ctx))
        if result.stage in ("json", "schema"):
            raise ModelRetry(result.text)
        return result.text

    async def invoke(
        self, name: str, raw: Any, tool_call_id: str | None, *, cut_off: int | None = None
    ) -> ToolResult:
        """Run one call of tool ``name`` through the boundary (the loop calls this):
        the events, the cleaned and scrubbed result, ``on_result``.

        ``cut_off``: the call came in an answer the provider cut off at its output limit (the
        output tokens it had, ``0`` when unknown); unusable arguments are then ``truncated_call``.
        """
        spec: ToolSpec[Any] | None = self._session.tools.get(name)
        if spec is None:
            return self.unknown(name, raw, tool_call_id)
        try:
            args = shown = decode_arguments(raw, name)
        except ToolError:  # call_tool answers it with the code; the event shows what was sent
            args, shown = raw, raw if isinstance(raw, str) else "(arguments nested too deeply)"
        self._session.emit("tool_call", name=name, args=shown, call_id=tool_call_id)
        with span(
            "kernos.tool_call", tool=name, call_id=tool_call_id,
            session_id=self._session.session_id, agent=self._session.agent,
        ) as traced:  # fmt: skip
            result = await call_tool(
                spec,
                args,
                ToolContext(
                    agent=self._session.agent,
                    session_id=self._session.session_id,
                    tool_call_id=tool_call_id,
                    extras={"session": self._session},
                    session=self._session,
                    workspace=getattr(self._session, "workspace", None),
                    store=self._session.store,
                ),
            )
            if cut_off is not None and result.stage in ("json", "schema"):
                result = truncated_call_result(name, cut_off or None)
            result, note = self._repeated(spec, args, result)
            traced.set(is_error=result.is_error, code=result.code, stage=result.stage)
            if result.repairs:  # what the boundary changed, without the values sent
                traced.set(
                    repairs=len(result.repairs),
                    repaired_fields=", ".join(r.field or "(arguments)" for r in result.repairs),
                    repair_rules=", ".join(r.rule for r in result.repairs),
                )
        if (text := clean_text(result.text)) is not result.text:  # tools may echo odd bytes too
            result = dataclasses.replace(result, text=text)
        result = scrub_result(result)  # the model, the store and the events never see a secret
        model = self._session.model.model_name
        if result.repairs:  # the receipt: for people, never in the text the model reads
            self._session.emit(
                "normalized", name=name, repairs=result.repairs, call_id=tool_call_id, model=model
            )
        shown = _noted(result, note)
        self._session.emit_result(name, shown, tool_call_id)
        result = _noted(delimited(result), note)  # a tool kernos did not write: its text is data
        self._on_result(tool_call_id or "", result)
        return result

    def _repeated(
        self, spec: ToolSpec[Any], args: Any, result: ToolResult
    ) -> tuple[ToolResult, str]:
        """``result`` (an invalid call's error naming its repetition) and the ``repeated_call``
        note to put before a successful result sent again in a row (``""``: none)."""
        invalid = result.stage in ("json", "schema")
        if result.is_error and not invalid:
            self._repeats.see(spec.name, "", False)  # a semantic error breaks the run
            return result, ""
        key = args if isinstance(args, str) else _prepared(spec, args)
        times = self._repeats.see(spec.name, call_key(key), not invalid)
        if invalid:
            if times < INVALID_REPEAT or result.code == "truncated_call":
                return result, ""
            text = repeated_error_text(result.text, spec.name, times)
            return dataclasses.replace(
                result, text=text, details={**result.details, "repeated": times}
            ), ""
        limit = getattr(self._session, "repeat_limit", REPEAT_LIMIT)
        if not repeat_due(limit, times):
            return result, ""
        details = {**result.details, "repeated": times}
        return dataclasses.replace(result, details=details), repeated_call_note(spec.name, times)

    def unknown(self, name: str, raw: Any, tool_call_id: str | None) -> ToolResult:
        """Answer a call of a tool the session does not have, shown like any other call."""
        result = unknown_tool_result(clean_text(name), self._session.tools.keys())
        self._session.emit("tool_call", name=name, args=raw, call_id=tool_call_id)
        self._on_result(tool_call_id or "", result)
        self._session.emit_result(name, result, tool_call_id)
        return result


def _noted(result: ToolResult, note: str) -> ToolResult:
    return dataclasses.replace(result, text=f"{note}\n\n{result.text}") if note else result


def _prepared(spec: ToolSpec[Any], args: Any) -> Any:
    """The arguments after the tool's ``prepare`` (what a repetition is compared by)."""
    try:
        return spec.prepare(args)
    except Exception:  # call_tool answered it already (prepare_failed)
        return args


def _cut_off(ctx: RunContext[Any]) -> int | None:
    """The output tokens of the answer this call came in when the provider cut it off, else None."""
    for message in reversed(ctx.messages):
        if isinstance(message, ModelResponse):
            if not (message.provider_details or {}).get(CUT_OFF):
                return None
            return message.usage.output_tokens or 0
    return None
