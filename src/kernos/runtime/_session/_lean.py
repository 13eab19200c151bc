"""The session loop (the "lean" loop): kernos's own loop for every model, without pydantic-ai's
graph.

Messages are the Chat Completions wire's plain dicts, kept in one list; tool schemas are
serialized once per tool set; every tool call goes through the one boundary
(:class:`kernos.runtime._session._toolset.KernosToolset`: coded errors, the retry budget, events).
``session.history`` is pydantic-ai messages (converted when read, and back when assigned).

Below the loop, one model interface (:class:`LeanModel`) and its adapters
(:func:`lean_model_for`): an ``openai-chat`` model on the pooled Chat Completions wire
(:class:`ChatLean`), a cassette (:class:`ReplayLean`), and every other pydantic-ai model through
its public ``request`` / ``request_stream`` (:class:`kernos.runtime._models._model_adapter.
PydanticModelLean`: Anthropic, Gemini, Bedrock, Groq, a ``FunctionModel``, …). Recording
(:class:`RecordingLean`), the DBOS engine's durable steps (a wrapper's ``wrap_lean``) and tracing
(:func:`kernos.runtime._trace._trace.chat_span`, in the loop) are written once, around that
interface.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from kernos.boundary import ToolResult
from kernos.runtime._errors import EmptyAnswers
from kernos.runtime._models._lean_models import ChatLean as ChatLean
from kernos.runtime._models._lean_models import LeanModel
from kernos.runtime._models._lean_models import lean_model_for as lean_model_for
from kernos.runtime._models._lean_wire import (
    Reply,
    dumps,
    tools_fragment,
)
from kernos.runtime._models._model_adapter import plain_tool_wire as plain_tool_wire
from kernos.runtime._rules._budget import too_many_tool_calls_text, tool_calls_allowed
from kernos.runtime._rules._compaction import compacted_view
from kernos.runtime._session._session_port import SessionPort
from kernos.runtime._session._toolset import KernosToolset
from kernos.runtime._trace._trace import capture_content, chat_span

EMPTY_RETRY = "Please return text or call a tool."  # pydantic-ai's words for an empty answer
_OUTPUT_RETRIES = 1  # pydantic-ai's default output retry budget (unknown tools)
EMPTY_RETRIES = 2  # answers with no text and no tool call asked again (``empty_retries``)


# -- messages ------------------------------------------------------------------------------------


@dataclass
class _ToolMeta:
    name: str
    retried: bool


_RETRY = object()  # meta of the system message pydantic-ai sends after an empty answer


def to_model_messages(
    messages: Sequence[dict[str, Any]], meta: Sequence[Any], instructions: str
) -> list[ModelMessage]:
    """Wire dicts (and their metadata) as pydantic-ai messages (``Session.history``)."""
    out: list[ModelMessage] = []
    request: list[Any] = []

    def flush() -> None:
        if request:
            out.append(ModelRequest(parts=list(request), instructions=instructions or None))
            request.clear()

    for message, info in zip(messages, meta, strict=True):
        role = message.get("role")
        if role == "assistant":
            flush()
            out.append(_response(message, info))
        elif role == "user":
            flush()  # a new prompt is a new request
            request.append(UserPromptPart(str(message.get("content") or "")))
        elif role == "tool":
            name = info.name if isinstance(info, _ToolMeta) else ""
            content = str(message.get("content") or "")
            retried = isinstance(info, _ToolMeta) and info.retried
            request.append(
                ToolReturnPart(
                    name,
                    _unwrap_error(content) if retried else content,
                    tool_call_id=str(message.get("tool_call_id") or ""),
                    outcome="retried" if retried else "success",
                )
            )
        elif role == "system" and info is not _RETRY:
            request.append(SystemPromptPart(str(message.get("content") or "")))
    flush()
    return out


def _unwrap_error(content: str) -> str:
    try:
        data = json.loads(content)
    except ValueError:
        return content
    return str(data["error"]) if isinstance(data, dict) and "error" in data else content


def _response(message: dict[str, Any], info: Any) -> ModelResponse:
    parts: list[TextPart | ToolCallPart] = []
    if message.get("content"):
        parts.append(TextPart(str(message["content"])))
    if isinstance(info, Reply):
        parts += [ToolCallPart(name, args, call_id) for call_id, name, args in info.calls]
        usage = RequestUsage(
            input_tokens=info.input_tokens,
            output_tokens=info.output_tokens,
            cache_read_tokens=info.cached_tokens,
        )
        return ModelResponse(
            parts=parts,
            usage=usage,
            model_name=info.model_name,
            provider_name=_provider(info),
        )
    return ModelResponse(parts=parts)


def _provider(reply: Reply) -> str | None:
    """Who answered, as the history and the usage rows name it (a cassette: nobody)."""
    return None if reply.model_name == "replay" else reply.provider_name


def from_model_messages(history: Sequence[ModelMessage]) -> tuple[list[dict[str, Any]], list[Any]]:
    """pydantic-ai messages as wire dicts plus their metadata (for an assigned history)."""
    messages: list[dict[str, Any]] = []
    meta: list[Any] = []
    names: dict[str, str] = {}
    for message in history:
        if isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = [p for p in message.parts if isinstance(p, ToolCallPart)]
            wire: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                wire["tool_calls"] = [
                    {
                        "id": p.tool_call_id,
                        "type": "function",
                        "function": {"name": p.tool_name, "arguments": p.args_as_json_str()},
                    }
                    for p in calls
                ]
                names.update((p.tool_call_id, p.tool_name) for p in calls)
            usage = message.usage
            messages.append(wire)
            meta.append(
                Reply(
                    text=text,
                    calls=[(p.tool_call_id, p.tool_name, p.args_as_json_str()) for p in calls],
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cached_tokens=usage.cache_read_tokens,
                    model_name=message.model_name,
                    provider_name=message.provider_name,
                )
            )
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                content = part.content if isinstance(part.content, str) else str(part.content)
                messages.append({"role": "user", "content": content})
                meta.append(None)
            elif isinstance(part, ToolReturnPart):
                retried = getattr(part, "outcome", None) == "retried"
                text = part.model_response_str()
                messages.append(
                    {"role": "tool", "tool_call_id": part.tool_call_id, "content": text}
                )
                meta.append(_ToolMeta(part.tool_name, retried))
            elif isinstance(part, RetryPromptPart):
                text = part.model_response()
                if part.tool_name:
                    messages.append(
                        {"role": "tool", "tool_call_id": part.tool_call_id, "content": text}
                    )
                    meta.append(_ToolMeta(part.tool_name, True))
                else:
                    messages.append({"role": "user", "content": text})
                    meta.append(None)
            elif isinstance(part, SystemPromptPart):
                messages.append({"role": "system", "content": part.content})
                meta.append(None)
    return messages, meta


# -- the loop ------------------------------------------------------------------------------------


class LeanLoop:
    """One session's conversation on the loop (its messages, its tools' wire text)."""

    def __init__(self, session: SessionPort, model: LeanModel) -> None:
        self.session = session
        self.model = model
        self.messages: list[dict[str, Any]] = []
        self.meta: list[Any] = []
        self._toolset = KernosToolset(session, session._results.__setitem__)
        self._empty_answers = False
        self._tools_key: tuple[int, ...] | None = None
        self._tools_text = ""
        #: the current run's first message and its replies so far (:meth:`run`)
        self.start = 0
        self.replies: list[Reply] = []

    # -- history -----------------------------------------------------------------------------
    @property
    def history(self) -> list[ModelMessage]:
        return to_model_messages(self.messages, self.meta, self.session.system_prompt)

    @history.setter
    def history(self, value: Sequence[ModelMessage]) -> None:
        self.messages, self.meta = from_model_messages(value)
        self._empty_answers = not all(
            _sendable(m) for m in self.messages if m["role"] == "assistant"
        )

    def _tools(self) -> str:
        specs = self.session.tools.values()
        key = tuple(id(spec) for spec in specs)
        if key != self._tools_key:
            self._tools_text = tools_fragment([self.model.tool_wire(spec) for spec in specs])
            self._tools_key = key
        return self._tools_text

    def _add(self, message: dict[str, Any], info: Any = None) -> None:
        self.messages.append(message)
        self.meta.append(info)

    # -- one prompt --------------------------------------------------------------------------
    async def run(self, text: str) -> tuple[str, list[Reply], int]:
        """Send ``text`` and run until the model answers without tool calls (or a stop).

        Returns the final text, the replies of this run and where its messages start.

        Raises:
            UnexpectedModelBehavior: a tool's retry budget is spent (an answer empty too often
            is the session's ``_failure``, raised after the turns are recorded).
        """
        session = self.session
        start = self.start = len(self.messages)
        self._add({"role": "user", "content": text})
        retries: dict[str, int] = {}
        empty = 0
        replies: list[Reply] = []
        self.replies = replies  # what a prompt that raises got (the session records it)
        on_delta = self._delta if session.stream else None
        while True:
            if session.compacting is not None and not session._stop_requested:
                await session.compacting.before_request(self)  # runtime/_session/_compacting.py
            if session._stop_requested or not session._before_request():
                return _last_text(self.messages), replies, start
            wire_messages = self._wire()
            with chat_span(session.model.model_name, wire_messages) as traced:
                reply = await self.model.answer(wire_messages, self._tools(), on_delta)
                if traced.recording:  # tracing off: the figures are not even gathered
                    traced.set_genai(reply_attributes(reply))
            replies.append(reply)
            if session.compacting is not None:
                session.compacting.reported(reply.input_tokens)
            wire: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if reply.calls:
                wire["tool_calls"] = [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": wire_arguments(a)},
                    }
                    for call_id, name, a in reply.calls
                ]
            self._add(wire, reply)
            if not reply.calls:
                if reply.text:
                    return reply.text, replies, start
                if empty >= session.empty_retries:
                    # the session raises it once this run's turns and usage are recorded
                    session._failure = EmptyAnswers(session.model.model_name, empty + 1)
                    return "", replies, start
                empty += 1
                self._empty_answers = True
                self._add({"role": "system", "content": EMPTY_RETRY}, _RETRY)
                continue
            limit = tool_calls_allowed(session.budget)
            run = reply.calls if limit is None else reply.calls[:limit]
            cut = (reply.output_tokens or 0) if reply.finish_reason == "length" else None
            failed: set[str] = set()  # tools whose calls of this answer spend a retry
            if len(run) == 1:
                answers = [await self._call(*run[0], (retries, failed), cut)]
            else:
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(self._call(*c, (retries, failed), cut)) for c in run]
                answers = [task.result() for task in tasks]
            for name in failed:  # one retry per tool per answer, however many of its calls failed
                retries[name] = retries.get(name, 0) + 1
            answers += [self._refuse(call_id, name) for call_id, name, _ in reply.calls[len(run) :]]
            for (call_id, name, _), (content, retried) in zip(reply.calls, answers, strict=True):
                self._add(
                    {"role": "tool", "tool_call_id": call_id, "content": content},
                    _ToolMeta(name, retried),
                )

    def wire(self) -> list[dict[str, Any]]:
        """The messages the next request sends (the compacted view, :attr:`Session.summary`)."""
        return self._wire()

    def tools_text(self) -> str:
        """The tools' wire text the next request sends."""
        return self._tools()

    def _wire(self) -> list[dict[str, Any]]:
        system = self.session.system_prompt  # the tools offered may add a sentence to it
        sent = compacted_view(self.messages, self.session.summary)
        messages = [{"role": "system", "content": system}, *sent] if system else sent
        if self._empty_answers:  # an empty answer is kept (history, store) but never sent
            messages = [m for m in messages if m["role"] != "assistant" or _sendable(m)]
        return messages

    def _delta(self, text: str) -> None:
        self.session.emit_delta(text)

    async def _call(
        self,
        call_id: str,
        name: str,
        args: str,
        retries: tuple[dict[str, int], set[str]],
        cut: int | None = None,
    ) -> tuple[str, bool]:
        session = self.session
        spec = session.tools.get(name)
        if spec is None:
            self._spend(name, _OUTPUT_RETRIES, retries)
            return dumps({"error": self._toolset.unknown(name, args, call_id).text}), True
        result = await self._toolset.invoke(name, args, call_id, cut_off=cut)
        if result.stage in ("json", "schema"):
            self._spend(name, self._toolset._retries(spec), retries)
            return dumps({"error": result.text}), True
        return result.text, False

    def _refuse(self, call_id: str, name: str) -> tuple[str, bool]:
        """A call past the per-turn cap: not run, answered ``too_many_tool_calls``."""
        limit = tool_calls_allowed(self.session.budget) or 0
        result = ToolResult(
            too_many_tool_calls_text(limit),
            {"code": "too_many_tool_calls", "stage": "semantic", "tool": name},
            is_error=True,
        )
        self.session._results[call_id] = result
        self.session.emit_result(name, result, call_id)
        return result.text, False

    @staticmethod
    def _spend(name: str, budget: int, retries: tuple[dict[str, int], set[str]]) -> None:
        """A failed call of ``name``: the run fails once the retries of earlier answers used
        ``budget`` up; else the tool spends one retry for this answer (as pydantic-ai counts)."""
        spent, failed = retries
        if spent.get(name, 0) >= budget:
            raise UnexpectedModelBehavior(
                f"Tool {name!r} exceeded max retries count of {budget}. Consider raising the retry "
                "limit, or see the docs on tool retries: "
                "https://pydantic.dev/docs/ai/tools-toolsets/tools-advanced/#tool-retries"
            )
        failed.add(name)

    # -- what the session records ------------------------------------------------------------
    def record(self, start: int, *, complete: bool = True) -> None:
        """Record this run's messages (from ``start``) in the store.
        ``complete=False``: the run raised; a last answer whose tool calls got no result is
        left out (a continued session must not send calls with no result)."""
        store = self.session.store
        if store is None:
            return
        end = len(self.messages)
        if not complete and end > start and self.messages[-1].get("tool_calls"):
            end -= 1
        sid, agent = self.session.session_id, self.session.agent
        key = self.session._turn_key  # keyed in a durable run: a replay records nothing twice
        results: list[dict[str, Any]] = []
        pending = self.session._results
        for message, info in zip(self.messages[start:end], self.meta[start:end], strict=True):
            role = message["role"]
            if role == "tool":
                record: dict[str, Any] = {
                    "id": message["tool_call_id"],
                    "name": info.name if isinstance(info, _ToolMeta) else "",
                    "text": message["content"],
                }
                result: ToolResult | None = pending.get(message["tool_call_id"])
                if result is not None and result.details:
                    record["details"] = result.details
                results.append(record)
                continue
            if results:
                store.record_turn(sid, agent, "tool", tool_results=results, key=key())
                results = []
            if role == "user":
                store.record_turn(sid, agent, "user", message["content"], key=key())
            elif role == "assistant":
                reply = info if isinstance(info, Reply) else Reply()
                calls = [{"id": i, "name": n, "args": a} for i, n, a in reply.calls]
                store.record_turn(
                    sid,
                    agent,
                    "assistant",
                    message.get("content") or "",
                    tool_calls=calls,
                    input_tokens=reply.input_tokens,
                    output_tokens=reply.output_tokens,
                    key=key(),
                )
        if results:
            store.record_turn(sid, agent, "tool", tool_results=results, key=key())


def usage_responses(replies: Sequence[Reply]) -> list[ModelResponse]:
    """The ``usage`` event's responses (pydantic-ai ``ModelResponse`` objects)."""
    return [_response({"content": r.text}, r) for r in replies]


def reply_usage(replies: Sequence[Reply]) -> list[dict[str, Any]]:
    """The usage rows' entries of ``replies``: what
    :func:`kernos.runtime._session._usage.response_usage` reads from their
    :func:`usage_responses`, without making a pydantic-ai message per answer (a session with no
    event listener records its usage every turn and shows no response to anyone)."""
    return [
        {
            "model": r.model_name,
            "provider": _provider(r),
            "input_tokens": int(r.input_tokens or 0),
            "output_tokens": int(r.output_tokens or 0),
            "cached_tokens": int(r.cached_tokens or 0),
        }
        for r in replies
    ]


def _sendable(message: dict[str, Any]) -> bool:
    return bool(message.get("content") or message.get("tool_calls"))


def wire_arguments(args: str) -> str:
    """Tool-call arguments as sent back in the history, as pydantic-ai sends them: compact JSON,
    and unparseable text wrapped as ``{"INVALID_JSON": text}`` (servers reject it raw); the
    store, the cassette and ``history`` keep what the model sent."""
    try:
        value = json.loads(args) if args.strip() else {}
    except (ValueError, RecursionError):  # nested too deeply to parse is unusable too
        return dumps({"INVALID_JSON": args})
    return dumps(value)


def _last_text(messages: Sequence[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return ""


def reply_attributes(reply: Reply) -> dict[str, Any]:
    """A model answer's figures under the GenAI convention's names (for its ``chat`` span)."""
    values: dict[str, Any] = {
        "gen_ai.response.model": reply.model_name,
        "gen_ai.usage.input_tokens": reply.input_tokens,
        "gen_ai.usage.output_tokens": reply.output_tokens,
        "gen_ai.response.finish_reasons": [reply.finish_reason] if reply.finish_reason else None,
    }
    if capture_content(os.environ):
        output: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.calls:
            output["tool_calls"] = [{"id": i, "name": n, "arguments": a} for i, n, a in reply.calls]
        values["gen_ai.output.messages"] = json.dumps([output], ensure_ascii=False)
    return values
