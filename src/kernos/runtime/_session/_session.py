"""A session: one conversation between kernos and a model under one agent definition."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic_ai
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model

from kernos.boundary import ToolResult, ToolSpec, clean_text
from kernos.runtime._models._lean_models import lean_model_for
from kernos.runtime._models._lean_wire import Reply
from kernos.runtime._rules._budget import Budget, BudgetExceeded, BudgetMeter
from kernos.runtime._rules._compaction import CompactSettings, Summary
from kernos.runtime._rules._foreign import has_foreign_tools, tool_results_note
from kernos.runtime._rules._repeats import REPEAT_LIMIT
from kernos.runtime._session._compacting import Compacted, CompactionStep, Compactor
from kernos.runtime._session._compaction_store import latest_summary
from kernos.runtime._session._lean import EMPTY_RETRIES, LeanLoop, reply_usage, usage_responses
from kernos.runtime._session._toolsets import Watcher
from kernos.runtime._session._usage_log import record_call, record_usage
from kernos.runtime._store._store import Store
from kernos.runtime._trace._trace import span

if TYPE_CHECKING:
    from kernos.runtime._approval._approval import Approver

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
        engine: accepted and ignored: every model runs on kernos's one loop
            (:class:`kernos.runtime._session._lean.LeanLoop`; a model of another provider through
            :class:`kernos.runtime._models._model_adapter.PydanticModelLean`).
        stream: ask for streamed answers and emit each piece of text as a ``delta`` event.
        repeat_limit: the identical successful call in a row whose result starts with a coded
            ``repeated_call`` note (``[tasks] repeat_limit``; ``0``: never).
        empty_retries: answers with no text and no tool call that are asked again before the
            prompt fails with :class:`~kernos.runtime.EmptyAnswers` (config
            ``[models.NAME] empty_retries``).
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
        self._watchers: Sequence[Watcher] = ()
        #: the durable run whose turns are keyed, and how many it recorded (:meth:`key_turns`)
        self._turn_run: str | None = None
        self._turns_keyed = 0
        self._usage_keyed = 0
        self._calls_keyed = 0
        #: compaction (runtime/_session/_compacting.py): the step, when the model declares a window,
        #: and the approved summary the model is sent instead of the turns it covers
        self.compacting: CompactionStep | None = None
        self.summary: Summary | None = None
        self._lean = LeanLoop(self, lean_model_for(model))

    @property
    def system_prompt(self) -> str:
        """What the model reads as the system prompt: the instructions, and once a tool kernos
        did not write is offered, the sentence saying its delimited results are data
        (:mod:`kernos.runtime._rules._foreign`)."""
        if not has_foreign_tools(self.tools.values()):
            return self.instructions
        note = tool_results_note()
        return f"{self.instructions}\n\n{note}" if self.instructions else note

    @property
    def engine(self) -> str:
        """``"lean"``: every session runs on kernos's one loop (kept for callers that read it)."""
        return "lean"

    @property
    def history(self) -> list[ModelMessage]:
        """The conversation as pydantic-ai messages (assignable: a restored history continues)."""
        return self._lean.history

    @history.setter
    def history(self, value: list[ModelMessage]) -> None:
        self._lean.history = value
        if self.store is not None:  # a resumed session is sent its compacted view
            self.summary = latest_summary(self.store, self.session_id)

    # -- compaction -------------------------------------------------------------------------
    def set_compaction(self, settings: CompactSettings | None, compactor: Compactor | None) -> None:
        """Compact this session's middle turns before a request that crosses ``settings``'s
        threshold, through ``compactor`` (``None`` for either: never automatically). The loop
        sends the compacted view itself (:meth:`kernos.runtime._session._lean.LeanLoop.wire`)."""
        if settings is None or compactor is None:
            self.compacting = None
            return
        self.compacting = CompactionStep(self, settings, compactor)

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
            return await self.compacting.before_request(self._lean, force=True)

    # -- budget -----------------------------------------------------------------------------
    def set_budget(self, budget: Budget | None) -> None:
        """Limit the runs from now on (``max_turns``, ``max_tokens``; counted afresh from here).
        ``timeout`` is the caller's to enforce (the task scheduler's asyncio timeout)."""
        self.budget = BudgetMeter(budget, seen=len(self.history)) if budget else None

    def _before_request(self) -> bool:
        """The loop calls this right before it sends a model request; false: do not send
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
        a coded error is counted here (``usage_calls``, :func:`kernos.runtime._session._usage_log.
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
            final, replies, start = await self._lean.run(text)
            self.last_text = final
            self._lean.record(start)
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
        self._record_usage(replies)
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

    def _record_usage(self, replies: list[Reply]) -> None:
        """Store one usage row per model response (keyed like the turns in a durable run), then
        emit the ``usage`` event (its pydantic-ai responses made only for a listener): recorded
        here, once, whichever process runs the session."""
        if self.usage_store is not None:
            entries = reply_usage(replies)
            keys = [self._usage_key() for _ in entries]
            record_usage(self.usage_store, self.session_id, self.agent, entries, keys)
        if self.on_event is not None:
            self.emit("usage", responses=usage_responses(replies))

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

    def _record_failed(self, *, keep_turns: bool = True) -> list[Reply]:
        """Record the turns of a prompt that raised (unless ``keep_turns`` is false); returns the
        model answers it received."""
        replies, start = self._lean.replies, self._lean.start
        if keep_turns:
            self._lean.record(start, complete=False)
        return replies
