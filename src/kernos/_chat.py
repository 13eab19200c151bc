"""``kernos chat``: one session kept open across many turns, each turn a session prompt.

The terminal (line editing, Ctrl-C, Ctrl-D) belongs to the main thread; the session, its toolsets
and its background children live on an event loop in a thread of their own, so children go on
while the person types and a Ctrl-C lands in the main thread, where it cancels the running turn's
task and nothing else (:meth:`Chat.turn`). The session is the one ``kernos run`` makes
(:func:`kernos._app.agent_session`), in the same store, so ``kernos run --continue`` and ``kernos
chat --continue`` continue each other.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kernos._app import LeftChild, agent_session, failed_outcome, left_children
from kernos.runtime import BudgetExceeded, EmptyAnswers, Runtime, Session, SessionEvent, Toolset
from kernos.tasks import TaskStore, TaskToolset

#: the lines that are commands, not prompts, and what each does (``/help`` lists them)
COMMANDS = {
    "/tasks": "list this session's child tasks and their status",
    "/usage": "tokens and cost of this chat so far",
    "/help": "show these commands",
    "/exit": "leave (Ctrl-D does too)",
}


@dataclass(frozen=True)
class Line:
    """What a typed line asks for: ``kind`` is ``prompt`` (``text`` goes to the agent),
    ``command`` (``text`` is one of :data:`COMMANDS`), ``unknown`` (a ``/word`` that is no
    command) or ``empty``."""

    kind: str
    text: str = ""


def parse_line(line: str) -> Line:
    """A typed line as a prompt or a command: ``/tasks``, ``/usage``, ``/help``, ``/exit`` (any
    case, surrounding spaces ignored; ``/quit`` is ``/exit``). A line starting ``//`` is a prompt
    that starts with ``/`` (the first one dropped); other ``/word`` lines are ``unknown``."""
    stripped = line.strip()
    if not stripped:
        return Line("empty")
    if stripped.startswith("//"):
        return Line("prompt", line.lstrip()[1:])
    if stripped.startswith("/") and " " not in stripped:
        word = stripped.lower()
        word = "/exit" if word == "/quit" else word
        return Line("command", word) if word in COMMANDS else Line("unknown", stripped)
    return Line("prompt", line)


@dataclass(frozen=True)
class TurnOutcome:
    """How one turn ended: its final text; ``cancelled`` when Ctrl-C stopped it; ``error`` (one
    line) and ``exit_code`` (1 the turn failed on the way, 2 configuration must change) when it
    failed."""

    text: str = ""
    cancelled: bool = False
    error: str | None = None
    exit_code: int = 1


class Chat:
    """An agent session open across turns, on its own event-loop thread.

    ::

        with Chat(runtime, "main", on_event=print) as chat:
            outcome = chat.turn("hello")   # Ctrl-C meanwhile: outcome.cancelled

    Args:
        runtime: models, config and the store.
        agent: the agent to talk to.
        on_event: called for each session event (on the session's thread).
        session_id: continue this session (with ``history``, its restored messages).
        history: the messages of the session being continued.
        stream: the agent's text arrives as ``delta`` events while it is written.

    Raises:
        ConfigError: on entry, a toolset could not offer its tools (an MCP server that did not
            start, an unknown tool name).
    """

    def __init__(
        self,
        runtime: Runtime,
        agent: str = "main",
        *,
        on_event: Callable[[SessionEvent], None] | None = None,
        session_id: str | None = None,
        history: Sequence[Any] = (),
        stream: bool = True,
    ) -> None:
        self.runtime = runtime
        self.agent = agent
        self._on_event = on_event
        self._session_id = session_id
        self._history = list(history)
        self._stream = stream
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready: concurrent.futures.Future[Session] = concurrent.futures.Future()
        self._leave: asyncio.Event | None = None
        self._task: asyncio.Task[TurnOutcome] | None = None
        self._toolsets: list[Toolset] = []
        #: the children left unfinished when the chat ended (recorded ``lost``)
        self.left: tuple[LeftChild, ...] = ()

    # -- the session's thread ---------------------------------------------------------------
    def __enter__(self) -> Chat:
        self._thread = threading.Thread(target=self._run, name="kernos-chat", daemon=True)
        self._thread.start()
        try:
            self.session = self._ready.result()
        except BaseException:
            self._thread.join()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        loop, leave = self._loop, self._leave
        if loop is not None and leave is not None and not loop.is_closed():
            loop.call_soon_threadsafe(leave.set)
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # an error opening the session: the main thread raises it
            if not self._ready.done():
                self._ready.set_exception(exc)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._leave = asyncio.Event()
        options: dict[str, Any] = {} if self._session_id is None else {
            "session_id": self._session_id
        }  # fmt: skip
        # wait=True: a child's result is delivered to the session (a turn waits for it); on
        # leaving, the task toolset stops waiting (below), so children still running are left
        async with agent_session(
            self.runtime,
            self.agent,
            on_event=self._on_event,
            wait=True,
            stream=self._stream,
            **options,
        ) as (session, toolsets):
            self._toolsets = toolsets
            if self._history:
                session.history = self._history  # before the first prompt (the resume seam)
            self._ready.set_result(session)
            await self._leave.wait()
            if self._task is not None and not self._task.done():
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            for toolset in toolsets:
                if isinstance(toolset, TaskToolset):
                    toolset.wait = False  # the person left: nobody reads a result from now on
        self.left = left_children(self._toolsets)

    # -- turns ------------------------------------------------------------------------------
    def turn(self, text: str) -> TurnOutcome:
        """Send ``text`` as a prompt and wait for the turn to end (background children it
        started included, their completions delivered, as ``kernos run`` waits). A Ctrl-C
        (``KeyboardInterrupt`` in this, the main thread) cancels this turn's task only: the
        session stays open with its history as before the turn, and children go on."""
        loop = self._loop
        assert loop is not None, "Chat.turn is called inside `with Chat(...)`"
        result: concurrent.futures.Future[TurnOutcome] = concurrent.futures.Future()

        def start() -> None:
            task = loop.create_task(self._turn(text))
            self._task = task

            def done(task: asyncio.Task[TurnOutcome]) -> None:
                # cancelled before its first step, the coroutine never saw the cancellation
                result.set_result(
                    TurnOutcome(cancelled=True) if task.cancelled() else task.result()
                )

            task.add_done_callback(done)

        loop.call_soon_threadsafe(start)
        try:
            return _result(result)
        except KeyboardInterrupt:
            loop.call_soon_threadsafe(self._cancel)  # after start: callbacks run in order
        while True:
            try:
                return _result(result)  # the cancelled turn's cleanup is shielded and short
            except KeyboardInterrupt:
                continue

    def _cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _turn(self, text: str) -> TurnOutcome:
        session = self.session
        before = session.history
        try:
            final = await session.serve(text, self._toolsets)
        except asyncio.CancelledError:
            # a turn cut anywhere (mid-request, between a call and its result) leaves the
            # conversation as it was before it; its turns were never recorded (the engines
            # record a prompt's turns when it ends, see Session._run_once)
            session.history = before
            return TurnOutcome(cancelled=True)
        except Exception as exc:  # provider errors, retry budget spent: this turn failed
            if not isinstance(exc, EmptyAnswers | BudgetExceeded):
                session.history = before  # raised mid-turn: nothing of it was recorded
            failed = failed_outcome(self.runtime, self.agent, session, exc)
            return TurnOutcome(error=failed.error, exit_code=failed.exit_code)
        return TurnOutcome(text=final)

    def children(self) -> list[dict[str, Any]]:
        """This session's child tasks, oldest first (rows of the tasks table)."""
        return TaskStore(self.runtime.store).children(self.session.session_id)


#: how often the main thread wakes while a turn runs, to take a Ctrl-C (see :func:`_result`)
SIGNAL_POLL = 0.1


def _result(future: concurrent.futures.Future[TurnOutcome]) -> TurnOutcome:
    """``future``'s result, waited for in short slices. The kernel may hand SIGINT to any
    thread (the event loop's, a worker's): Python then runs its handler only once the main
    thread wakes, and a wait without a timeout would not wake until the turn had ended, so a
    Ctrl-C would cancel nothing."""
    while True:
        try:
            return future.result(timeout=SIGNAL_POLL)
        except concurrent.futures.TimeoutError:
            if future.done():
                raise  # the turn's own error
