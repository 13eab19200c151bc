"""Application wiring: the one place that knows every subsystem.

Layers below (boundary, runtime, tasks, output, compress) never import each other sideways; this
module composes them for ``kernos run`` and ``kernos demo``. Each subsystem contributes an
:class:`Attachment` to a session: the tools it adds, background work to wait for, cleanup.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from kernos.runtime import ConfigError, Runtime, Session, SessionEvent, Watcher

if TYPE_CHECKING:
    from kernos.output import OutputKernel


class Attachment(Watcher, Protocol):
    """What a subsystem hangs on a session: background work to wait for, and cleanup."""

    async def aclose(self, *, wait: bool) -> None:
        """Release resources; ``wait=False`` abandons unfinished work."""
        ...


@runtime_checkable
class Cancellable(Protocol):
    """An attachment whose unfinished work can be stopped and recorded as cancelled."""

    async def cancel(self, reason: str) -> None:
        """Stop unfinished work now; what was stopped is recorded ``cancelled`` with ``reason``."""
        ...


log = logging.getLogger("kernos.run")

T = TypeVar("T")

AttachFn = Callable[[Runtime, Session], Awaitable["Attachment | None"]]


async def _attach_outputs(runtime: Runtime, session: Session) -> Attachment | None:
    """Output channels: ``output_send__<channel>`` tools for the channels the agent may use."""
    from kernos.output import OutputKernel, output_tools

    kernel = OutputKernel.from_config(runtime.config)
    session.add_tools(output_tools(kernel, session.agent))
    return _ClosingKernel(kernel)


@dataclass(frozen=True)
class _ClosingKernel:
    """The output kernel as an attachment: no background work; closing closes its channels."""

    kernel: OutputKernel

    def outstanding(self) -> bool:
        return False

    async def wait_change(self) -> None:
        await asyncio.get_running_loop().create_future()  # never: nothing runs in the background

    async def aclose(self, *, wait: bool) -> None:
        await self.kernel.aclose()


async def _attach_tasks(runtime: Runtime, session: Session) -> Attachment | None:
    """Sub-agent tasks: ``task``, ``task_send``, ``task_output``, ``task_cancel``."""
    from kernos.tasks import TaskManager

    manager = TaskManager(runtime)
    session.add_tools(manager.tools_for(session))
    return manager.attachment(session)


async def _attach_tools(runtime: Runtime, session: Session) -> Attachment | None:
    """Workspace tools, ``[tools.NAME]`` functions and plugins, as the agent's ``tools`` selects."""
    from kernos.tools import agent_tools

    session.add_tools(
        agent_tools(runtime.config, session.agent, present=session.tools.__contains__)
    )
    return None


async def _attach_mcp(runtime: Runtime, session: Session) -> Attachment | None:
    """MCP servers: ``<server>__<tool>`` for every ``[mcp.NAME]`` server (started here, stopped
    when the run ends)."""
    if not runtime.config.mcp:
        return None
    from kernos.tools import McpServers, select_mcp_tools

    servers = McpServers(runtime.config)
    try:
        chosen, missing = select_mcp_tools(
            runtime.config.agent(session.agent).tools,
            await servers.tools(session),
            runtime.config.mcp,
        )
        if missing:
            raise ConfigError(
                runtime.config.path,
                f"agents.{session.agent}.tools",
                f"{', '.join(missing)} matches none of the MCP servers' tools",
                "run `kernos tools` to see what each server offers",
            )
        session.add_tools(t for t in chosen if t.name not in session.tools)
    except BaseException:
        await servers.aclose(wait=False)
        raise
    return servers


ATTACHERS: tuple[AttachFn, ...] = (_attach_outputs, _attach_tasks, _attach_tools, _attach_mcp)


@dataclass(frozen=True)
class RunOutcome:
    """How ``kernos run`` ended: the final text, and an error message when it failed."""

    text: str
    session_id: str
    error: str | None = None

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
) -> RunOutcome:
    """Run ``agent`` on ``prompt`` with every subsystem's tools; wait for background children
    (and deliver their completions) unless ``wait`` is false."""
    session = runtime.session(agent, on_event=on_event)
    log.info("run %s: agent %s on %s", session.session_id, agent, session.model.model_name)
    attachments: list[Attachment] = []
    try:
        for attach in ATTACHERS:
            attachment = await attach(runtime, session)
            if attachment is not None:
                attachments.append(attachment)
        text = await (session.serve(prompt, attachments) if wait else session.prompt(prompt))
    except asyncio.CancelledError:  # interrupted (run_until_signal): stop the children as well
        log.warning("run %s interrupted; cancelling its tasks", session.session_id)
        await _shielded(_cancel(attachments, "the run was interrupted"))
        raise
    except ConfigError:
        raise  # an MCP server that did not start: one line and exit 2, after the cleanup below
    except Exception as exc:  # provider errors, retry budget spent: the run failed
        log.warning("run %s failed: %s", session.session_id, _describe(exc))
        return RunOutcome(session.last_text, session.session_id, error=_describe(exc))
    finally:
        for attachment in attachments:
            await _shielded(attachment.aclose(wait=wait))
    log.info("run %s ended", session.session_id)
    return RunOutcome(text=text, session_id=session.session_id)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _cancel(attachments: Sequence[Attachment], reason: str) -> None:
    for attachment in attachments:
        if isinstance(attachment, Cancellable):
            await attachment.cancel(reason)


async def _shielded(work: Awaitable[None]) -> None:
    """Run cleanup to its end even if the task running it is cancelled again meanwhile."""
    future = asyncio.ensure_future(work)
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.cancelled():
                raise
    future.result()


class Interrupted(Exception):
    """The run was stopped by a signal; ``exit_code`` is ``128 + signum`` (130 SIGINT, 143
    SIGTERM)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


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
