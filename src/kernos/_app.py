"""Application wiring: the one place that knows every subsystem.

Layers below (boundary, runtime, tasks, output, compress, tools) never import each other sideways;
this module composes them for ``kernos run``, ``kernos demo`` and ``kernos mcp``. Each subsystem
is a :class:`kernos.runtime.Toolset`; :func:`agent_session` opens them all on one session with an
:class:`contextlib.AsyncExitStack` and closes them all, whatever happens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from kernos.errors import Interrupted as Interrupted
from kernos.runtime import (
    Config,
    ConfigError,
    Permissions,
    PermissionToolset,
    Runtime,
    Session,
    SessionEvent,
    Toolset,
    cancel_toolsets,
    shielded,
)

if TYPE_CHECKING:
    from kernos.boundary import ToolSpec
    from kernos.runtime import Compacted

log = logging.getLogger("kernos.run")

T = TypeVar("T")

#: builds one subsystem's toolset for a run (``wait``: wait for background work on exit); ``None``
#: when the subsystem has nothing to offer
ToolsetFactory = Callable[[Runtime, bool], "Toolset | None"]


def _output_toolset(runtime: Runtime, wait: bool) -> Toolset:
    """Output channels: ``output_send__<channel>`` tools for the channels the agent may use."""
    from kernos.output import OutputToolset

    return OutputToolset.from_config(runtime.config)


def _task_toolset(runtime: Runtime, wait: bool) -> Toolset:
    """Sub-agent tasks: ``task``, ``task_send``, ``task_output``, ``task_cancel``."""
    from kernos.tasks import TaskToolset

    return TaskToolset(runtime, wait=wait)


def _catalog_toolset(runtime: Runtime, wait: bool) -> Toolset:
    """Workspace tools, ``[tools.NAME]`` functions and plugins, as the agent's ``tools`` selects."""
    from kernos.tools import CatalogToolset

    return CatalogToolset(runtime.config)


def _mcp_toolset(runtime: Runtime, wait: bool) -> Toolset | None:
    """MCP servers: ``<server>__<tool>`` for every ``[mcp.NAME]`` server (started on first use,
    stopped when the run ends)."""
    if not runtime.config.mcp:
        return None
    from kernos.tools import McpAgentToolset

    return McpAgentToolset(runtime.config)


#: every subsystem's toolset, in the order their tools are added to a session
TOOLSETS: tuple[ToolsetFactory, ...] = (
    _output_toolset,
    _task_toolset,
    _catalog_toolset,
    _mcp_toolset,
)


class SharedMcpServers:
    """The ``[mcp.NAME]`` servers one process shares between its sessions (``kernos mcp``): every
    server whose table does not say ``per_session = true``. Each starts once, on the first
    session that lists its tools, and stops on :meth:`aclose`, not when a session ends; a
    ``per_session`` server is still started and stopped by each session.
    """

    def __init__(self, config: Config) -> None:
        from kernos.tools import McpToolset

        self.toolsets: dict[str, McpToolset] = {
            name: McpToolset(name, server, config_file=config.path, home=config.home)
            for name, server in config.mcp.items()
            if not server.per_session
        }

    def factories(self) -> tuple[ToolsetFactory, ...]:
        """:data:`TOOLSETS`, with each session's MCP toolset drawing on the shared servers."""

        def mcp(runtime: Runtime, wait: bool) -> Toolset | None:
            if not runtime.config.mcp:
                return None
            from kernos.tools import McpAgentToolset

            return McpAgentToolset(runtime.config, shared=self.toolsets)

        return tuple(mcp if make is _mcp_toolset else make for make in TOOLSETS)

    async def aclose(self) -> None:
        """Stop every shared server; never raises."""
        await asyncio.gather(*(toolset.stop() for toolset in self.toolsets.values()))


def _shielded_exit(toolset: Toolset) -> Callable[..., Awaitable[bool | None]]:
    async def exit_(
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await shielded(toolset.__aexit__(exc_type, exc, tb))
        return False  # never swallow what the body raised

    return exit_


@asynccontextmanager
async def agent_session(
    runtime: Runtime,
    agent: str = "main",
    *,
    on_event: Callable[[SessionEvent], None] | None = None,
    wait: bool = True,
    toolsets: Sequence[ToolsetFactory] = TOOLSETS,
    **session_options: Any,
) -> AsyncIterator[tuple[Session, list[Toolset]]]:
    """A session for ``agent`` with every subsystem's toolset open and its tools added.

    On exit — normal, error or cancellation — every toolset is closed, shielded from a second
    cancellation; a cancelled body first cancels the toolsets' unfinished work (children are
    recorded ``cancelled``). Used by ``kernos run`` and ``kernos mcp``::

        async with agent_session(runtime, "main") as (session, toolsets):
            text = await session.serve(prompt, toolsets)

    Args:
        runtime: models, config and the store.
        agent: the agent to run.
        on_event: called for each session event.
        wait: on exit, wait for background work (``False``: abandon it, children recorded lost).
        toolsets: the toolset factories (default: every subsystem's).
        session_options: passed to :meth:`kernos.runtime.Runtime.session`.

    Raises:
        ConfigError: a toolset could not offer its tools (an MCP server that did not start, an
            unknown tool name); the toolsets opened so far are closed first.
    """
    equip_compaction(runtime)
    session = runtime.session(agent, on_event=on_event, **session_options)
    permissions = Permissions(runtime.config, runtime.approver)
    opened: list[Toolset] = []
    async with AsyncExitStack() as stack:
        try:
            for make in toolsets:
                toolset = make(runtime, wait)
                if toolset is None:
                    continue
                await toolset.__aenter__()
                stack.push_async_exit(_shielded_exit(toolset))
                opened.append(toolset)
                # the permission rules wrap every source once: denied tools are not offered
                session.add_tools(await PermissionToolset(toolset, permissions).tools(session))
            await _equip_children(runtime, opened)
            yield session, opened
        except asyncio.CancelledError:
            log.warning("session %s interrupted; cancelling its tasks", session.session_id)
            await shielded(cancel_toolsets(opened, "the run was interrupted"))
            raise


def equip_compaction(runtime: Runtime) -> None:
    """Give ``runtime`` the compactor its sessions compact with (the compress protocol), unless
    it has one: ``compact_model`` names are resolved through it."""
    from kernos.compress import TranscriptCompactor

    if runtime.compactor is None:
        runtime.compactor = TranscriptCompactor(
            lambda name: runtime.model(runtime.model_name("main", name))
        )


def compact_by_hand(runtime: Runtime, session: Session, model: str | None = None) -> None:
    """Let ``session`` (on ``model``, default its agent's) compact when asked
    (:meth:`Session.compact`) even on a model that declares no window: the configured
    ``keep_turns``/``compact_model``, window unknown."""
    if session.compacting is None:
        name = runtime.model_name(session.agent, model)
        settings = runtime.config.compaction(name, agent=session.agent, manual=True)
        session.set_compaction(settings, runtime.compactor)


async def compact_session(runtime: Runtime, session_id: str) -> Compacted | None:
    """``kernos sessions compact ID``: compact the stored session ``session_id`` now, whatever
    its size; ``None`` when no turn is left to compact (the first prompt and the last
    ``keep_turns`` turns never are).

    Raises:
        ConfigError: no such session, or its model cannot be built.
        ContextExhausted: the summary was not approved (nothing changes).
    """
    from kernos.runtime import get_session, load_history

    row = get_session(runtime.store, session_id)
    if row is None:
        raise ConfigError(
            None,
            "session",
            f"there is no session {session_id} in this store ({runtime.home})",
            "`kernos sessions` lists them",
        )
    equip_compaction(runtime)
    model = row["model"] or None  # the model it last ran on, unless --model says otherwise
    session = runtime.session(row["agent"], session_id=session_id, model=model)
    session.history = load_history(runtime.store, session_id)
    compact_by_hand(runtime, session, model)
    try:
        return await session.compact()
    finally:
        await runtime.store.flushed()


async def child_tools(
    runtime: Runtime, opened: Sequence[Toolset]
) -> Callable[[str], list[ToolSpec[Any]]]:
    """What a child of each agent gets from that agent's definition, whatever its parent has:
    the catalog's selection for the agent (the built-in tools when it has no ``tools`` key) and
    its selection of the MCP servers among ``opened`` — what ``kernos tools --agent NAME``
    lists. The parent's ``tools`` grant adds to it (:class:`kernos.tasks.TaskManager`)."""
    from kernos.tools import McpServers, load_catalog, select_mcp_tools

    catalog = load_catalog(runtime.config)
    servers = next((t for t in opened if isinstance(t, McpServers)), None)
    # every server's tools (started when the parent's tools were listed): each agent selects
    offered = list(await McpServers.tools(servers)) if servers is not None else []
    known: dict[str, list[ToolSpec[Any]]] = {}
    permissions = Permissions(runtime.config, runtime.approver)

    def tools_of(agent: str) -> list[ToolSpec[Any]]:
        if agent not in known:
            patterns = runtime.config.agent(agent).tools
            mcp, _ = select_mcp_tools(patterns, offered, runtime.config.mcp)
            own = [e.spec for e in catalog.for_agent(agent)] + mcp
            known[agent] = permissions.apply(agent, own)
        return known[agent]

    return tools_of


async def _equip_children(runtime: Runtime, opened: Sequence[Toolset]) -> None:
    """Give the task toolset among ``opened`` its children's own tools (:func:`child_tools`)."""
    from kernos.tasks import TaskToolset

    for toolset in opened:
        if isinstance(toolset, TaskToolset) and toolset.manager.agent_tools is None:
            toolset.manager.agent_tools = await child_tools(runtime, opened)


@dataclass(frozen=True)
class LeftChild:
    """A child a run that did not wait (``kernos run --no-wait``) left unfinished: ``status``
    ``lost`` (stopped as the run ended) or ``pending``/``running`` (left to ``kernos worker``
    processes)."""

    id: str
    label: str
    status: str

    def line(self, ended: str) -> str:
        """What a person is told about it when ``ended`` (``the run``, ``the chat``) ended: where
        its result will be."""
        fate = (
            f"stopped unfinished (lost) as {ended} ended"
            if self.status == "lost"
            else f"left to the workers ({self.status})"
        )
        where = f"read it with `kernos tasks output {self.id}`"
        return f"child {self.id} ({self.label}) {fate}; {where}"


@dataclass(frozen=True)
class RunOutcome:
    """How ``kernos run`` ended: the final text, an error message when it failed, and the
    children it left unfinished when it did not wait for them."""

    text: str
    session_id: str
    error: str | None = None
    #: the exit code the error earns: 1 the run failed on the way, 2 configuration must change
    exit_code: int = 1
    left: tuple[LeftChild, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


async def run_agent(
    runtime: Runtime,
    prompt: str,
    *,
    agent: str = "main",
    wait: bool = True,
    on_event: Callable[[SessionEvent], None] | None = None,
    session_id: str | None = None,
    history: Sequence[Any] = (),
    stream: bool = False,
    compact: bool = False,
) -> RunOutcome:
    """Run ``agent`` on ``prompt`` with every subsystem's tools; wait for background children
    (and deliver their completions) unless ``wait`` is false. ``session_id`` and ``history``
    continue an earlier session (``kernos run --continue``): its id, its restored messages;
    ``stream``: the agent's text arrives as ``delta`` events while it is written; ``compact``:
    the continued session compacts before the prompt (``kernos run --continue --compact``)."""
    session: Session | None = None
    options: dict[str, Any] = {} if session_id is None else {"session_id": session_id}
    opened: list[Toolset] = []
    try:
        async with agent_session(
            runtime, agent, on_event=on_event, wait=wait, stream=stream, **options
        ) as (
            session,
            toolsets,
        ):
            opened = toolsets
            if history:
                session.history = list(history)  # before the first prompt (the resume seam)
            log.info("run %s: agent %s on %s", session.session_id, agent, session.model.model_name)
            try:
                if compact:
                    compact_by_hand(runtime, session)
                    await session.compact()
                text = await (session.serve(prompt, toolsets) if wait else session.prompt(prompt))
            except Exception as exc:  # provider errors, retry budget spent: the run failed
                outcome = failed_outcome(runtime, agent, session, exc)
            else:
                outcome = RunOutcome(text=text, session_id=session.session_id)
    except ConfigError:
        raise  # an MCP server that did not start: one line and exit 2, after the cleanup
    except Exception as exc:  # a toolset that failed to open or close
        if session is None:
            raise
        return dataclasses.replace(
            failed_outcome(runtime, agent, session, exc), left=left_children(opened)
        )
    log.info("run %s ended", outcome.session_id)
    left = left_children(opened)
    return dataclasses.replace(outcome, left=left) if left else outcome


def left_children(opened: Sequence[Toolset]) -> tuple[LeftChild, ...]:
    """The children the task toolset among ``opened`` left unfinished as it closed."""
    from kernos.tasks import TaskToolset

    return tuple(
        LeftChild(record.id, record.label, str(record.status))
        for toolset in opened
        if isinstance(toolset, TaskToolset)
        for record in toolset.manager.scheduler.abandoned
    )


def failed_outcome(runtime: Runtime, agent: str, session: Session, exc: Exception) -> RunOutcome:
    """The outcome of a run that raised ``exc``: a model request's failure as its one line
    (:func:`kernos.runtime.model_failure`), anything else as its type and first line."""
    from kernos.runtime import model_failure, model_target

    name = runtime.model_name(agent)
    failure = model_failure(exc, model_target(name, runtime.config, session.model))
    log.warning("run %s failed: %s", session.session_id, _describe(exc), exc_info=True)
    if failure is None:
        return RunOutcome(session.last_text, session.session_id, error=_describe(exc))
    return RunOutcome(
        session.last_text, session.session_id, error=failure.line, exit_code=failure.exit_code
    )


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def run_until_signal(
    work: Awaitable[T],
    *,
    on_signal: Callable[[int], None] | None = None,
    signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM),
) -> T:
    """Await ``work``; the first of ``signals`` cancels it (its cleanup runs: children are
    recorded ``cancelled``) and raises :class:`Interrupted`. A second signal exits at once.

    Raises:
        Interrupted: a signal arrived before ``work`` finished.
    """
    loop = asyncio.get_running_loop()
    main = asyncio.ensure_future(work)
    received: list[int] = []

    def handle(signum: int) -> None:
        if received:  # asked twice: stop now, cleanup or not
            os._exit(128 + received[0])
        received.append(signum)
        if on_signal is not None:
            on_signal(signum)
        main.cancel()

    installed: list[int] = []
    for signum in signals:
        try:
            loop.add_signal_handler(signum, handle, signum)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, Windows
            continue
        installed.append(signum)
    try:
        return await main
    except asyncio.CancelledError:
        if received:
            raise Interrupted(received[0]) from None
        raise
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
