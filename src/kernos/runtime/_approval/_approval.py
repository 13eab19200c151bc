"""Asking before a tool runs: the approver protocol and the toolset wrapper that applies the
permission rules (:mod:`kernos.runtime._rules._permissions`) to every tool a session is offered.

:class:`PermissionToolset` wraps any toolset once: a tool whose rule is ``deny`` is not offered
at all; every other tool's ``execute`` decides again for the call (the calling session's agent,
the call's ``path``), so a child handed its parent's tools is ruled by its own agent's table. An
``ask`` call goes to an :class:`Approver` — the CLI supplies one (a terminal prompt, its
``--approve`` / ``--yes`` flags; ``kernos mcp``: the host's elicitation); with none, it is refused
with ``approval_required``, unless the session has a ``waiter`` (a task's child: the call waits
as a durable approval request anyone sharing the store answers, ``kernos.tasks._approvals``).
A denial is a coded result (``denied``, with the reason) the model reads; the run goes on. No
tool answers an approval: only the approver the process was started with, or a person.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from wcmatch import fnmatch as wcfnmatch

from kernos.boundary import ToolContext, ToolError, ToolResult, ToolSpec
from kernos.runtime._rules._foreign import rewrapped
from kernos.runtime._rules._permissions import RULES, Decision, Rule, decide, offered
from kernos.runtime._secrets import scrub_text, scrub_value

if TYPE_CHECKING:
    from kernos.runtime._config._config import Config
    from kernos.runtime._store._store import Store

log = logging.getLogger("kernos.runtime")

#: ``how`` an asked call was answered when nobody could be asked
NOBODY = "no one to ask"
#: ``how`` ``--approve GLOB`` / ``--yes`` answered it
FLAG = "flag"

#: how to allow a tool when nobody can be asked, by where the call came from
TOML_HINT = 'allow it in kernos.toml: [permissions] allow = ["{tool}"]'


@dataclass(frozen=True)
class ApprovalRequest:
    """A call waiting for a person: the tool, its arguments, the caller, and for a file write
    the unified diff it would make (``preview``)."""

    tool: str
    arguments: dict[str, Any]
    agent: str
    session_id: str | None
    why: str
    preview: str | None = None
    #: whether a person at this process's terminal may be asked (``False``: a background child)
    interactive: bool = True
    #: the provider's id of the call (a durable request is keyed by it, with its run)
    call_id: str | None = None


@dataclass(frozen=True)
class ApprovalAnswer:
    """What an approver decided: ``approved``, else the code (``denied`` or
    ``approval_required``) and the reason the model reads."""

    approved: bool
    reason: str = ""
    code: str = "denied"
    #: the whole text the model reads for a refusal, when the approver words it itself (a
    #: durable request that timed out or expired); else it is made from ``reason``
    message: str | None = None
    #: who answered (a user name, a host's name) and how (``terminal``, ``flag``, ``no one to
    #: ask``, ``mcp host``): the request's row in the store says so (:data:`NOBODY`)
    by: str | None = None
    how: str | None = None
    #: the durable request that was answered (its row is already in the store)
    request_id: str | None = None


class Approver(Protocol):
    """Answers asked calls (a terminal prompt, flags, a test's script)."""

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        """The answer for ``request``; never raises for a person's ``no``."""
        ...


@runtime_checkable
class AskingSession(Protocol):
    """What approval needs of the calling session
    (:class:`kernos.runtime._session._session.Session`,
    which imports this module: approval never imports it back)."""

    #: whether a person at this process's terminal may be asked
    can_ask: Callable[[], bool]
    #: who answers an asked call nobody here could (``None``: refused)
    waiter: Approver | None


@dataclass
class NoApprover:
    """Nobody can answer here: every asked call is refused with ``approval_required`` and
    ``hint`` (``{tool}`` is replaced) says how to allow it."""

    hint: str = TOML_HINT

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        how = self.hint.format(tool=request.tool)
        return ApprovalAnswer(
            False,
            f"{request.tool} needs a person's approval and nobody can be asked here; {how}",
            "approval_required",
            how=NOBODY,
        )


def glob_covers(patterns: Sequence[str], tool: str) -> bool:
    """Whether one of ``patterns`` (tool-name globs) covers ``tool``."""
    return any(wcfnmatch.fnmatch(tool, p, flags=wcfnmatch.BRACE) for p in patterns)


@dataclass
class FlagApprover:
    """``--approve GLOB`` / ``--yes`` first, for every session of the run (children included);
    then ``terminal`` for a call a person here may be asked about; else ``fallback``."""

    approve_globs: Sequence[str] = ()
    yes: bool = False
    terminal: Approver | None = None
    fallback: Approver = field(default_factory=NoApprover)

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        if self.yes:
            return ApprovalAnswer(True, "--yes", by=user_name(), how=FLAG)
        covering = [p for p in self.approve_globs if glob_covers((p,), request.tool)]
        if covering:
            return ApprovalAnswer(True, f"--approve {covering[0]}", by=user_name(), how=FLAG)
        if self.terminal is not None and request.interactive:
            return await self.terminal.approve(request)
        return await self.fallback.approve(request)


def user_name() -> str:
    """The name of the person running this process (who answers at its terminal or flags)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown user"


def _arguments(params: Any) -> dict[str, Any]:
    if hasattr(params, "model_dump"):
        return dict(params.model_dump(mode="json", exclude_none=True))
    return dict(params) if isinstance(params, dict) else {}


def _path_of(arguments: dict[str, Any]) -> str | None:
    path = arguments.get("path")
    return path if isinstance(path, str) else None


def _interactive(session: Any) -> bool:
    return session.can_ask() if isinstance(session, AskingSession) else True


def _own(spec: ToolSpec[Any]) -> Rule | None:
    for rule in RULES:
        if spec.permission == rule:
            return rule
    return None


#: the ``execute`` functions :meth:`Permissions.guard` made (a spec is guarded once)
_GUARDED: weakref.WeakSet[Any] = weakref.WeakSet()


class Permissions:
    """The rules of one configuration, applied to tools with one approver."""

    def __init__(self, config: Config, approver: Approver | None = None) -> None:
        self.config = config
        self.approver: Approver = approver if approver is not None else NoApprover()

    def decision(self, agent: str, spec: ToolSpec[Any], path: str | None = None) -> Decision:
        """The rule for a call of ``spec`` by ``agent`` (on ``path``)."""
        return decide(self.config.permission_tables(agent), spec.name, path, _own(spec))

    def rule_of(self, agent: str, tool: str) -> Rule:
        """The rule for ``agent``'s calls of the tool named ``tool`` that declares no default
        of its own (the task and team tools), on no path."""
        return decide(self.config.permission_tables(agent), tool, None, None).rule

    def offered(self, agent: str, spec: ToolSpec[Any]) -> bool:
        """Whether ``agent`` is offered ``spec`` at all (its rule is not ``deny``)."""
        return offered(self.config.permission_tables(agent), spec.name, _own(spec))

    def guard(self, spec: ToolSpec[Any]) -> ToolSpec[Any]:
        """``spec`` whose ``execute`` first applies the rule for the call (once per spec)."""
        if spec.execute in _GUARDED:
            return spec
        inner = spec.execute

        async def execute(params: Any, ctx: ToolContext) -> ToolResult | str:
            arguments = _arguments(params)
            agent = ctx.session.agent if ctx.session is not None else ctx.agent
            decision = self.decision(agent, spec, _path_of(arguments))
            if decision.rule == "deny":
                raise ToolError(
                    "denied",
                    f"{spec.name} is denied for agent {agent} ({decision.why}); do the task "
                    "without it or tell the user what you could not do",
                )
            if decision.rule == "ask":
                preview = spec.preview(params, ctx) if spec.preview is not None else None
                request = ApprovalRequest(
                    spec.name,
                    arguments,
                    agent,
                    ctx.session_id,
                    decision.why,
                    preview,
                    _interactive(ctx.session),
                    ctx.tool_call_id,
                )
                asked_at = time.time()
                answer = await self.approver.approve(request)
                waiter = ctx.session.waiter if isinstance(ctx.session, AskingSession) else None
                if not answer.approved and answer.code == "approval_required" and waiter:
                    # nobody here may answer: a task's child asks anyone sharing the store
                    answer = await waiter.approve(request)
                if answer.request_id is None and ctx.store is not None:
                    await _record(ctx.store, request, answer, asked_at)
                if not answer.approved:
                    if answer.code == "approval_required":
                        raise ToolError("approval_required", answer.reason)
                    if answer.message is not None:
                        raise ToolError(answer.code, answer.message)
                    reason = answer.reason.strip()
                    raise ToolError(
                        "denied",
                        f"the user denied this {spec.name} call"
                        + (f": {reason}" if reason else " without a reason")
                        + "; do not repeat it unchanged, adapt or ask the user",
                    )
            return await inner(params, ctx)

        _GUARDED.add(execute)
        return rewrapped(spec, execute)

    def apply(self, agent: str, specs: Sequence[ToolSpec[Any]]) -> list[ToolSpec[Any]]:
        """The specs ``agent`` is offered, each guarded."""
        return [self.guard(s) for s in specs if self.offered(agent, s)]


async def _record(
    store: Store, request: ApprovalRequest, answer: ApprovalAnswer, at: float
) -> None:
    """Keep the answered ``request`` as a row of the store's approval requests (who answered,
    how, when); a store that cannot take it is logged, the call goes on."""
    from kernos.runtime._approval._approval_store import ApprovalStore

    def write() -> None:
        ApprovalStore(store).record(
            request,
            task_id=None,
            approved=answer.approved,
            asked_at=at,
            by=answer.by,
            how=answer.how,
            reason=answer.reason or None,
        )

    try:
        await asyncio.to_thread(write)
    except Exception as exc:  # the answer stands; only its row is missing
        log.warning("the answer to a %s call was not kept in the store: %s", request.tool, exc)


class PermissionToolset:
    """Any toolset with the permission rules applied: denied tools left out, the others
    guarded (see :class:`Permissions`). Everything else is the inner toolset's."""

    def __init__(self, inner: Any, permissions: Permissions) -> None:
        self.inner = inner
        self.permissions = permissions

    @property
    def name(self) -> str:
        return str(self.inner.name)

    async def tools(self, session: Any) -> list[ToolSpec[Any]]:
        return self.permissions.apply(session.agent, list(await self.inner.tools(session)))

    def outstanding(self) -> bool:
        return bool(self.inner.outstanding())

    async def wait_change(self) -> None:
        await self.inner.wait_change()

    async def __aenter__(self) -> PermissionToolset:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self.inner.__aexit__(*exc_info)


def describe_arguments(arguments: dict[str, Any], *, skip: Sequence[str] = ()) -> str:
    """The arguments as one short JSON line each, for a person reading a request."""
    lines = []
    for key, value in arguments.items():
        if key in skip:
            continue
        text = json.dumps(scrub_value(value), ensure_ascii=False)
        lines.append(f"  {key}: {text if len(text) <= 200 else text[:197] + '...'}")
    return "\n".join(lines)


def request_text(request: ApprovalRequest) -> str:
    """What a person is shown for ``request``: the tool, who asks and why, the arguments, and
    the diff a file write would make (the arguments it shows are left out of the list). Pure."""
    shown = ("content", "old_string", "new_string") if request.preview else ()
    lines = [
        f"kernos: {request.tool} needs your approval (agent {request.agent}; {request.why})",
        describe_arguments(request.arguments, skip=shown),
    ]
    if request.preview:
        lines.append(scrub_text(request.preview.rstrip("\n")))
    return "\n".join(line for line in lines if line) + "\n"
