"""``kernos mcp``: an asked call is put to the host's human through MCP elicitation (approve, or
deny with a reason the model reads) when the host supports it; otherwise it is refused with
``approval_required`` text naming the ``kernos.toml`` line that allows the tool. Never silently
allowed. A background child's calls are not the host's to answer: they wait as durable requests
(:mod:`kernos.tasks._approvals`)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kernos.runtime import ApprovalAnswer, ApprovalRequest, Approver, NoApprover, request_text

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

#: the host request a served tool call runs in (its connection can elicit)
_HOST: contextvars.ContextVar[ServerRequestContext[Any, Any] | None] = contextvars.ContextVar(
    "kernos_mcp_host", default=None
)

#: ``how`` a call the host's user answered is kept in the store
HOW = "mcp host"

#: the form a host shows for an asked call
APPROVAL_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve", "description": "Run this call"},
        "reason": {
            "type": "string",
            "title": "Reason",
            "description": "If you deny it: why (the model reads it)",
        },
    },
    "required": ["approve"],
}


@contextlib.contextmanager
def hosted_call(ctx: ServerRequestContext[Any, Any] | None) -> Iterator[None]:
    """Within it, an asked call may be put to the host of ``ctx``."""
    token = _HOST.set(ctx)
    try:
        yield
    finally:
        _HOST.reset(token)


def can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the host of ``ctx`` declared the elicitation capability."""
    import mcp_types

    wanted = mcp_types.ClientCapabilities(elicitation=mcp_types.ElicitationCapability())
    try:
        return bool(ctx.session.check_client_capability(wanted))
    except Exception:  # a connection that cannot tell: it is not asked
        return False


class HostApprover:
    """The approver of ``kernos mcp`` (when nothing else was set): the host's human, else
    ``fallback`` (refused with ``approval_required``)."""

    def __init__(self, fallback: Approver | None = None) -> None:
        self.fallback: Approver = fallback if fallback is not None else NoApprover()

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        ctx = _HOST.get()
        if ctx is None or not request.interactive or not can_elicit(ctx):
            return await self.fallback.approve(request)
        try:
            answer = await ctx.session.elicit_form(
                request_text(request).rstrip("\n"),
                APPROVAL_FORM,
                related_request_id=ctx.request_id,
            )
        except Exception as exc:  # the host failed to ask: refused, never allowed
            return ApprovalAnswer(False, f"the host could not ask its user ({exc})", how=HOW)
        by = host_name(ctx)
        content = answer.content or {}
        if answer.action == "accept" and content.get("approve") is True:
            return ApprovalAnswer(True, by=by, how=HOW)
        reason = str(content.get("reason") or "").strip()
        if not reason and answer.action != "accept":
            reason = f"the host's user {'declined' if answer.action == 'decline' else 'cancelled'}"
        return ApprovalAnswer(False, reason, by=by, how=HOW)


def host_name(ctx: ServerRequestContext[Any, Any]) -> str:
    """Who answered through the host of ``ctx``: its user, named by the client it declared."""
    try:
        info = ctx.session.client_params.client_info  # type: ignore[union-attr]
        return f"the user of {info.name}"
    except Exception:  # a connection that did not say: the host's user
        return "the host's user"
