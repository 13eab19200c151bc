"""A session: one conversation between kernos and a model under one agent definition."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic_ai
from pydantic_ai import Agent, CallToolsNode
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    RetryPromptPart,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import FunctionModel

from kernos.boundary import ToolResult, ToolSpec, clean_text
from kernos.runtime._budget import Budget, BudgetExceeded, BudgetMeter
from kernos.runtime._chat import inner_layer
from kernos.runtime._clean import clean_model, clean_response, cut_off_calls
from kernos.runtime._compacting import (
    Compacted,
    CompactedViewModel,
    CompactionStep,
    Compactor,
    PydanticView,
)
from kernos.runtime._compaction import CompactSettings, Summary
from kernos.runtime._compaction_store import latest_summary
from kernos.runtime._errors import EmptyAnswers
from kernos.runtime._foreign import has_foreign_tools, tool_results_note
from kernos.runtime._lean import EMPTY_RETRIES, LeanLoop, lean_model_for, usage_responses
from kernos.runtime._repeats import REPEAT_LIMIT
from kernos.runtime._store import Store
from kernos.runtime._toolset import KernosToolset
from kernos.runtime._toolsets import Watcher
from kernos.runtime._trace import span
from kernos.runtime._usage import response_usage
from kernos.runtime._usage_log import record_call, record_usage

if TYPE_CHECKING:
    from kernos.runtime._approval import Approver

# pydantic-ai shows a first-run banner on a terminal (or to a coding agent) at an agent's first run:
# in the middle of `kernos run`'s output and over the compress progress bar. kernos owns its output.
pydantic_ai.BANNER_ENABLED = False


@dataclass(frozen=True)
class SessionEvent:
    """Something a session did, for progress output: ``kind`` is ``prompt``, ``request`` (a
    model request is being sent to ``data["model"]``; its answer is the next ``delta``,
    ``tool_call``, ``text`` or ``request`` of the session), ``tool_call``, ``normalized`` (what
    the boundary changed in a call's arguments, between its ``tool_call`` and ``tool_result``:
    ``name``, ``call_id``, ``model`` and ``repairs``, a tuple of
    :class:`kernos.boundary.Repair`), ``tool_result`` (``name``, ``call_id``, ``model``,
    ``result``), ``usage`` (the turn's model responses), ``delta`` (a piece of streamed
    assistant text, ``data["text"]``; only when the session streams; see
    :meth:`Session.emit_delta`), ``text`` or ``idle``."""

    session_id: str
    agent: str
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


def new_session_id() -> str:
    return "s_" + secrets.token_hex(4)


class Session:
    """One conversation. ``await prompt(text)`` runs until the model stops calling tools.

    Args:
        model: the pydantic-ai model.
        instructions: the agent's system instructions.
        tools: the kernos tools the model may call (more can be added with :meth:`add_tools`).
        agent: the agent's name, for logs and tool contexts.
        session_id: a stable id (new ``s_…`` when omitted).
        store: where turns are recorded (none: not recorded), and the session's usage.
        usage_store: where the usage is recorded when ``store`` is none (one row per model
            response, and the tool calls the boundary repaired or rejected), its turns not
            (``kernos compress``: a file's drafts are no conversation to list or continue).
        on_event: called for each :class:`SessionEvent`.
        retries: the retry budget of every tool in this session (config ``retries``); ``None``
            keeps each tool's own ``max_retries``.
        workspace: the workspace policy tools see in their context (``ToolContext.workspace``).
        engine: ``"lean"`` or ``"pydantic-ai"``; ``None`` picks one (``KERNOS_ENGINE``, the
            model alias's ``engine``, else lean for OpenAI-compatible Chat Completions models
            and cassettes, pydantic-ai for the rest).
        stream: ask for streamed answers and emit each piece of text as a ``delta`` event.
        repeat_limit: the identical successful call in a row whose result starts with a coded
            ``repeated_call`` note (``[tasks] repeat_limit``; ``0``: never).
        empty_retries: answers with no text and no tool call that are asked again before the
            prompt fails with :class:`~kernos.runtime.EmptyAnswers` (config
            ``[models.NAME] empty_retries``).

    Raises:
        ConfigError: ``engine`` or ``KERNOS_ENGINE`` names no engine.
    """

    def __init__(
        self,
        model: Model,
        instructions: str = "",
        tools: Iterable[ToolSpec[Any]] = (),
        *,
        agent: str = "main",
        session_id: str | None = None,
        store: Store | None = None,
        usage_store: Store | None = None,
        on_event: Callable[[SessionEvent], None] | None = None,
        retries: int | None = None,
        workspace: Any = None,
        engine: str | None = None,
        stream: bool = False,
        repeat_limit: int = REPEAT_LIMIT,
        empty_retries: int = EMPTY_RETRIES,
    ) -> None:
        self.model = model
        self.repeat_limit = repeat_limit
        self.empty_retries = empty_retries
        #: how the current prompt failed, raised once its turns and usage are recorded
        self._failure: Exception | None = None
        self.stream = stream
        self.retries = retries
        self.workspace = workspace
        self.instructions = instructions
        self.agent = agent
        #: whether a person at this process's terminal may be asked to approve this session's
        #: calls (a background child's task manager says no: nobody waits on it)
        self.can_ask: Callable[[], bool] = lambda: True
        #: who answers this session's asked calls that nobody here could (a task's child: a
        #: durable approval request, :mod:`kernos.tasks._approvals`); ``None``: refused
        self.waiter: Approver | None = None
        self.session_id = session_id or new_session_id()
        self.store = store
        #: where the usage rows and tool-call counts go (``store``, else ``usage_store``)
        self.usage_store = store if store is not None else usage_store
        self.tools: dict[str, ToolSpec[Any]] = {}
        self.last_text = ""
        self.on_event = on_event
        self.add_tools(tools)
        self._queue: list[str] = []
        self._queued = asyncio.Event()
        self._lock = asyncio.Lock()
        self._running: asyncio.Task[Any] | None = None
        self._stop_requested = False
        self._results: dict[str, ToolResult] = {}
        #: the current run's limits and what it used (see :meth:`set_budget`); ``None``: none
        self.budget: BudgetMeter | None = None
        #: the limit the current prompt ran into (raised once its turns are recorded)
        self._exceeded: BudgetExceeded | None = None
        self._history: list[ModelMessage] = []
        self._watchers: Sequence[Watcher] = ()
        #: the durable run whose turns are keyed, and how many it recorded (:meth:`key_turns`)
        self._turn_run: str | None = None
        self._turns_keyed = 0
        self._usage_keyed = 0
        self._calls_keyed = 0
        #: where the current pydantic-ai prompt's messages start in the history
        self._before = 0
        #: compaction (runtime/_compacting.py): the step, when the model declares a window, and
        #: the approved summary the model is sent instead of the turns it covers
        self.compacting: CompactionStep | None = None
        self.summary: Summary | None = None
        self._view_wrapped = False
        lean = lean_model_for(model, engine)
        self._lean = None if lean is None else LeanLoop(self, lean)
        self._toolset = KernosToolset(self, self._results.__setitem__)
        self._agent = (
            self._make_agent(clean_model(model))  # the model's text is cleaned once, there
            if self._lean is None
            else None
        )

    def _make_agent(self, model: Model) -> Agent[None, str]:
        return Agent(
            model,
            instructions=self._system_prompt,
            toolsets=[self._toolset],
            name=self.agent,
            retries={"output": self.empty_retries},
        )

    @property
    def system_prompt(self) -> str:
        """What the model reads as the system prompt: the instructions, and once a tool kernos
        did not write is offered, the sentence saying its delimited results are data
        (:mod:`kernos.runtime._foreign`)."""
        if not has_foreign_tools(self.tools.values()):
            return self.instructions
        note = tool_results_note()
        return f"{self.instructions}\n\n{note}" if self.instructions else note

    def _system_prompt(self) -> str:
        return self.system_prompt  # pydantic-ai reads it for each request

    @property
    def engine(self) -> str:
        """The engine this session runs on: ``"lean"`` or ``"pydantic-ai"``."""
        return "pydantic-ai" if self._lean is None else "lean"

    @property
    def history(self) -> list[ModelMessage]:
        """The conversation as pydantic-ai messages (assignable: a restored history continues)."""
        return self._history if self._lean is None else self._lean.history

    @history.setter
    def history(self, value: list[ModelMessage]) -> None:
        if self._lean is None:
            self._history = value
        else:
            self._lean.history = value
        if self.store is not None:  # a resumed session is sent its compacted view
            self.summary = latest_summary(self.store, self.session_id)
            if self.summary is not None:
                self._send_view()

    # -- compaction -------------------------------------------------------------------------
    def set_compaction(self, settings: CompactSettings | None, compactor: Compactor | None) -> None:
        """Compact this session's middle turns before a request that crosses ``settings``'s
        threshold, through ``compactor`` (``None`` for either: never automatically). On the
        pydantic-ai engine the model is wrapped so that it is sent the compacted view."""
        if settings is None or compactor is None:
            self.compacting = None
            return
        self.compacting = CompactionStep(self, settings, compactor)
        self._send_view()

    def _send_view(self) -> None:
        """On pydantic-ai: from now on the model is sent what :class:`CompactedViewModel` makes
        of the history (the compacted view); the lean loop builds its view itself."""
        if self._lean is None and not self._view_wrapped:
            self._agent = self._make_agent(CompactedViewModel(clean_model(self.model), self))
            self._view_wrapped = True

    async def compact(self) -> Compacted | None:
        """Compact now, whatever the request's size (``kernos sessions compact``); ``None``: no
        turn to compact.

        Raises:
            ContextExhausted: the summary was not approved.
            ValueError: the session has no compaction step (:meth:`set_compaction`).
        """
        if self.compacting is None:
            raise ValueError("this session cannot compact: no compactor was set")
        async with self._lock:
            view = self._lean if self._lean is not None else PydanticView(self, self._history)
            return await self.compacting.before_request(view, force=True)

    # -- budget -----------------------------------------------------------------------------
    def set_budget(self, budget: Budget | None) -> None:
        """Limit the runs from now on (``max_turns``, ``max_tokens``; counted afresh from here).
        ``timeout`` is the caller's to enforce (the task scheduler's asyncio timeout)."""
        self.budget = BudgetMeter(budget, seen=len(self.history)) if budget else None

    def _before_request(self) -> bool:
        """Every engine calls this right before it sends a model request; false: do not send
        it, the run is over its budget (the prompt raises :class:`BudgetExceeded` once its turns
        and usage are recorded). A request that is sent is a ``request`` event first."""
        if not self._within_budget():
            return False
        self.emit("request", model=self.model.model_name)
        return True

    def _within_budget(self) -> bool:
        meter = self.budget
        if meter is None:
            return True
        if meter.budget.max_tokens is not None:
            history = self.history
            for message in history[meter.seen :]:
                if isinstance(message, ModelResponse):
                    meter.add_tokens(message.usage.input_tokens + message.usage.output_tokens)
            meter.seen = len(history)
        try:
            meter.before_request()
        except BudgetExceeded as exc:
            self._exceeded = exc
            return False
        return True

    def key_turns(self, run: str | None) -> None:
        """Key the turns recorded from now on ``RUN:1``, ``RUN:2``, … (``None``: unkeyed). A
        durable run replayed after a crash records the turns of its replayed part again, under
        the same keys: the store keeps the first of each, so the history is not doubled."""
        self._turn_run, self._turns_keyed, self._usage_keyed, self._calls_keyed = run, 0, 0, 0

    def _turn_key(self) -> str | None:
        if self._turn_run is None:
            return None
        self._turns_keyed += 1
        return f"{self._turn_run}:{self._turns_keyed}"

    # -- tools ------------------------------------------------------------------------------
    def add_tools(self, tools: Iterable[ToolSpec[Any]]) -> None:
        """Add tools; a name already present is a developer error."""
        for spec in tools:
            if spec.name in self.tools:
                raise ValueError(f"session {self.session_id}: tool {spec.name!r} added twice")
            self.tools[spec.name] = spec

    def emit(self, kind: str, **data: Any) -> None:
        if self.on_event is not None:
            self.on_event(SessionEvent(self.session_id, self.agent, kind, data))

    def emit_result(self, name: str, result: ToolResult, call_id: str | None) -> None:
        """The ``tool_result`` event of one call. A call the boundary repaired or rejected with
        a coded error is counted here (``usage_calls``, :func:`kernos.runtime._usage_log.
        record_call`), once, whichever process runs the session, like its usage rows (keyed
        like them in a durable run, so a replay does not count it again)."""
        model = self.model.model_name
        if self.usage_store is not None:
            record_call(
                self.usage_store, self.session_id, self.agent, model, name, result, self._call_key
            )
        self.emit("tool_result", name=name, result=result, call_id=call_id, model=model)

    # -- queued messages --------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._lock.locked()

    @property
    def pending_messages(self) -> int:
        return len(self._queue)

    def inject(self, text: str) -> None:
        """Queue a message; it is delivered as the next user turn (batched with others ready)."""
        self._queue.append(text)
        self._queued.set()

    async def wait_for_messages(self) -> None:
        """Block until at least one message is queued."""
        while not self._queue:
            self._queued.clear()
            await self._queued.wait()

    def take_queued(self) -> str | None:
        """Pop every queued message as one turn (``None`` when the queue is empty)."""
        if not self._queue:
            return None
        batch, self._queue = self._queue, []
        self._queued.clear()
        return "\n\n".join(batch)

    # -- running ----------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop the current run after its current step (the next model request is not sent)."""
        self._stop_requested = True

    def cancel(self) -> None:
        """Cancel the current run now (the prompt raises ``asyncio.CancelledError``)."""
        if self._running is not None and not self._running.done():
            self._running.cancel()

    async def prompt(self, text: str, *, drain: bool = True) -> str:
        """Send ``text`` and run until idle; then deliver queued messages the same way.

        Returns the last assistant text.
        """
        async with self._lock, span("kernos.prompt", session_id=self.session_id, agent=self.agent):
            self._running = asyncio.current_task()
            try:
                final = await self._run_once(text)
                while drain and not self._stop_requested:
                    queued = self.take_queued()
                    if queued is None:
                        break
                    final = await self._run_once(queued)
            finally:
                self._running = None
                self._stop_requested = False
            self.emit("idle", text=final)
            return final

    def emit_delta(self, text: str) -> None:
        """A piece of streamed assistant text: ``delta`` with ``text`` and ``background`` (true
        while background work of :meth:`serve` is outstanding, so more turns will follow and
        this answer is not the last)."""
        background = any(w.outstanding() for w in self._watchers) or bool(self._queue)
        self.emit("delta", text=text, background=background)

    async def serve(self, text: str, watchers: Sequence[Watcher] = ()) -> str:
        """Prompt, then keep delivering queued messages as new turns until no watcher has
        outstanding work and nothing is queued; returns the last assistant text."""
        self._watchers = watchers
        try:
            return await self._serve(text, watchers)
        finally:
            self._watchers = ()

    async def _serve(self, text: str, watchers: Sequence[Watcher]) -> str:
        final = await self.prompt(text)
        while True:
            queued = self.take_queued()
            if queued is not None:
                final = await self.prompt(queued)
                continue
            if not any(w.outstanding() for w in watchers):
                return final
            waits = [asyncio.ensure_future(self.wait_for_messages())]
            waits += [asyncio.ensure_future(w.wait_change()) for w in watchers]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
                await asyncio.gather(*waits, return_exceptions=True)

    async def _run_once(self, text: str) -> str:
        text = clean_text(text)  # argv and stdin can carry lone surrogates too (surrogateescape)
        self.emit("prompt", text=text)
        try:
            if self._lean is not None:
                final, replies, start = await self._lean.run(text)
                self.last_text = final
                self._lean.record(start)
                responses: list[ModelResponse] = usage_responses(replies)
            else:
                final, responses = await self._run_pydantic_ai(text)
        except asyncio.CancelledError:
            # a cancelled prompt (Ctrl-C in a chat, a signal, a timeout) is not part of the
            # conversation that goes on (a chat rewinds to before it): its turns are not kept,
            # the usage of every response that reached kernos is
            self._record_usage(self._record_failed(keep_turns=False))
            raise
        except BaseException:
            # a prompt that fails on the way (a model error) keeps what it got: its turns so far
            # and the usage of every response that reached kernos
            self._record_usage(self._record_failed())
            raise
        self._record_usage(responses)
        if self.usage_store is not None:
            # the turns and usage are acknowledged before the prompt returns
            await self.usage_store.flushed()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure  # after the turns and their usage are recorded
        exceeded, self._exceeded = self._exceeded, None
        if exceeded is not None:
            raise exceeded  # after the turns and their usage are recorded
        self.emit("text", text=final)
        return final

    def _record_usage(self, responses: list[ModelResponse]) -> None:
        """Store one usage row per response (keyed like the turns in a durable run), then emit
        the ``usage`` event: recorded here, once, whichever process runs the session."""
        if self.usage_store is not None:
            entries = response_usage(responses)
            keys = [self._usage_key() for _ in entries]
            record_usage(self.usage_store, self.session_id, self.agent, entries, keys)
        self.emit("usage", responses=responses)

    def _usage_key(self) -> str | None:
        if self._turn_run is None:
            return None
        self._usage_keyed += 1
        return f"{self._turn_run}:{self._usage_keyed}"

    def _call_key(self) -> str | None:
        if self._turn_run is None:
            return None
        self._calls_keyed += 1
        return f"{self._turn_run}:{self._calls_keyed}"

    def _record_failed(self, *, keep_turns: bool = True) -> list[ModelResponse]:
        """Record the turns of a prompt that raised (unless ``keep_turns`` is false); returns the
        responses it received."""
        if self._lean is not None:
            replies, start = self._lean.replies, self._lean.start
            if keep_turns:
                self._lean.record(start, complete=False)
            return usage_responses(replies)
        # pydantic-ai ends the history of a request that raised with an empty response of its
        # own (no parts, no model): no answer reached kernos
        new = [m for m in self._history[self._before :] if not _placeholder(m)]
        if keep_turns:
            self._record(_complete(new))
        return [m for m in new if isinstance(m, ModelResponse)]

    async def _run_pydantic_ai(self, text: str) -> tuple[str, list[ModelResponse]]:
        assert self._agent is not None
        before = self._before = len(self._history)
        try:
            final = await self._iterate(text)
        except UnexpectedModelBehavior:
            empty = _trailing_empty(self._history[before:])
            if not empty:
                raise
            # pydantic-ai's output retries are spent on answers with nothing in them
            self._failure = EmptyAnswers(self.model.model_name, empty)
            final = ""
        self.last_text = final
        new = self._history[before:]
        self._record(new)
        return final, [m for m in new if isinstance(m, ModelResponse)]

    async def _iterate(self, text: str) -> str:
        assert self._agent is not None
        stopped = False
        async with self._agent.iter(text, message_history=self._history) as run:
            node = run.next_node
            while not Agent.is_end_node(node):
                if Agent.is_model_request_node(node):
                    if self.compacting is not None and not self._stop_requested:
                        pending = run.all_messages()  # runtime/_compacting.py
                        if not any(m is node.request for m in pending):
                            pending = [*pending, node.request]
                        await self.compacting.before_request(PydanticView(self, pending))
                    if self._stop_requested or not self._before_request():
                        stopped = True
                        break
                    if self.stream and _streams(self.model):
                        async with node.stream(run.ctx) as events:
                            async for event in events:
                                if piece := _text_delta(event):
                                    self.emit_delta(clean_text(piece))
                        node = await run.next(node)
                        if isinstance(node, CallToolsNode):  # before its tools run
                            # a streamed answer bypasses CleanTextModel.request: clean it here
                            response = node.model_response
                            cut = cut_off_calls(response)  # a call cut off: for the tools
                            response.parts = clean_response(cut).parts
                            response.finish_reason = cut.finish_reason
                            response.provider_details = cut.provider_details
                        self._history = run.all_messages()
                        continue
                ran, node = node, await run.next(node)
                if isinstance(ran, CallToolsNode) and Agent.is_model_request_node(node):
                    self._answer_unknown_calls(node.request, ran.model_response)
                self._history = run.all_messages()
            self._history = run.all_messages()
            if stopped or run.result is None:
                final = _last_text(self._history)
            else:
                output = run.result.output
                final = output if isinstance(output, str) else str(output)
        return final

    def _answer_unknown_calls(self, request: ModelRequest, response: ModelResponse) -> None:
        """pydantic-ai answers a call of a tool it does not know with its own retry text before
        any toolset sees it; kernos's coded ``unknown_tool`` answer (the lean loop's too) and its
        events replace it here, before the request goes out."""
        for part in request.parts:
            if not isinstance(part, RetryPromptPart | ToolReturnPart) or (
                isinstance(part, ToolReturnPart) and part.outcome != "retried"
            ):
                continue
            if part.tool_name is not None and part.tool_name not in self.tools:
                args = next(
                    (
                        p.args
                        for p in response.parts
                        if isinstance(p, ToolCallPart) and p.tool_call_id == part.tool_call_id
                    ),
                    None,
                )
                part.content = self._toolset.unknown(part.tool_name, args, part.tool_call_id).text

    def _record(self, messages: Sequence[ModelMessage]) -> None:
        if self.store is None:
            return
        for message in messages:
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    if isinstance(part, UserPromptPart):
                        content = (
                            part.content if isinstance(part.content, str) else str(part.content)
                        )
                        self.store.record_turn(
                            self.session_id, self.agent, "user", content, key=self._turn_key()
                        )
                results = [
                    _result_record(part, self._results.get(part.tool_call_id))
                    for part in message.parts
                    if isinstance(part, ToolReturnPart | RetryPromptPart)
                ]
                if results:
                    self.store.record_turn(
                        self.session_id,
                        self.agent,
                        "tool",
                        tool_results=results,
                        key=self._turn_key(),
                    )
            elif isinstance(message, ModelResponse):
                calls = [
                    {"id": p.tool_call_id, "name": p.tool_name, "args": p.args}
                    for p in message.parts
                    if isinstance(p, ToolCallPart)
                ]
                self.store.record_turn(
                    self.session_id,
                    self.agent,
                    "assistant",
                    "".join(p.content for p in message.parts if isinstance(p, TextPart)),
                    tool_calls=calls,
                    input_tokens=message.usage.input_tokens,
                    output_tokens=message.usage.output_tokens,
                    key=self._turn_key(),
                )


def _placeholder(message: ModelMessage) -> bool:
    return isinstance(message, ModelResponse) and not message.parts and not message.model_name


def _complete(messages: Sequence[ModelMessage]) -> Sequence[ModelMessage]:
    """``messages`` without a last response whose tool calls were never answered (a prompt
    that failed while its tools ran): a continued session must not send calls with no result."""
    if (
        messages
        and isinstance(messages[-1], ModelResponse)
        and any(isinstance(p, ToolCallPart) for p in messages[-1].parts)
    ):
        return messages[:-1]
    return messages


def _streams(model: Model) -> bool:
    """Whether pydantic-ai can stream ``model`` (a cassette answers whole turns)."""
    layer: Model | None = model
    while layer is not None:
        if isinstance(layer, FunctionModel) and layer.stream_function is None:
            return False
        layer = inner_layer(layer)
    return True


def _text_delta(event: Any) -> str:
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


def _result_record(
    part: ToolReturnPart | RetryPromptPart, result: ToolResult | None
) -> dict[str, Any]:
    text = part.model_response_str() if isinstance(part, ToolReturnPart) else part.model_response()
    record: dict[str, Any] = {"id": part.tool_call_id, "name": part.tool_name, "text": text}
    if result is not None and result.details:
        record["details"] = result.details
    return record


def _last_text(history: Sequence[ModelMessage]) -> str:
    for message in reversed(history):
        if isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            if text:
                return text
    return ""


def _trailing_empty(messages: Sequence[ModelMessage]) -> int:
    """How many answers at the end of ``messages`` had no text and no tool call."""
    count = 0
    for message in reversed(messages):
        if not isinstance(message, ModelResponse):
            continue
        if any(
            (isinstance(p, TextPart) and p.content) or isinstance(p, ToolCallPart)
            for p in message.parts
        ):
            break
        count += 1
    return count
