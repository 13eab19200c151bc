"""Application wiring: the one place that knows every subsystem.

Layers below (boundary, runtime, tasks, output, compress) never import each other sideways; this
module composes them for ``kernos run`` and ``kernos demo``. Each subsystem contributes an
:class:`Attachment` to a session: the tools it adds, background work to wait for, cleanup.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from kernos.runtime import Runtime, Session, SessionEvent, Watcher


class Attachment(Watcher, Protocol):
    """What a subsystem hangs on a session: background work to wait for, and cleanup."""

    async def aclose(self, *, wait: bool) -> None:
        """Release resources; ``wait=False`` abandons unfinished work."""
        ...


log = logging.getLogger("kernos.run")

AttachFn = Callable[[Runtime, Session], Awaitable["Attachment | None"]]


async def _attach_outputs(runtime: Runtime, session: Session) -> Attachment | None:
    """Output channels: ``output_send__<channel>`` tools for the channels the agent may use."""
    from kernos.output import OutputKernel, output_tools

    session.add_tools(output_tools(OutputKernel.from_config(runtime.config), session.agent))
    return None


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


ATTACHERS: tuple[AttachFn, ...] = (_attach_outputs, _attach_tasks, _attach_tools)


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
    attachments = [a for a in [await attach(runtime, session) for attach in ATTACHERS] if a]
    try:
        text = await (session.serve(prompt, attachments) if wait else session.prompt(prompt))
    except Exception as exc:  # provider errors, retry budget spent: the run failed
        log.warning("run %s failed: %s", session.session_id, _describe(exc))
        return RunOutcome(session.last_text, session.session_id, error=_describe(exc))
    finally:
        for attachment in attachments:
            await attachment.aclose(wait=wait)
    log.info("run %s ended", session.session_id)
    return RunOutcome(text=text, session_id=session.session_id)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
