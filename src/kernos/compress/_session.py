"""One file, one isolated session: the method as the whole system prompt, two tools."""

from __future__ import annotations

import enum
from collections.abc import Callable
from functools import cache

from pydantic_ai.models import Model

from kernos.compress._protocol import CompressProtocol
from kernos.compress._tools import compress_tools, read_text
from kernos.compress._turns import new_nonce, request_turn, review_turn
from kernos.runtime import Session, Store


class Status(enum.StrEnum):
    """How a file's run ended."""

    APPROVED = "approved"  # a reviewed draft was approved; it is written
    UNAPPROVED = "unapproved"  # drafts exist, none approved (stall or over budget); nothing written
    STALLED = "stalled"  # no draft at all (or nothing to compress); nothing written
    CANCELLED = "cancelled"  # read, provider or write error, or an interrupt; nothing written


@cache
def method_text() -> str:
    """The compression method: the compress agent's entire system prompt."""
    return read_text("method.md").strip()


def outcome(protocol: CompressProtocol, rounds: int) -> tuple[Status, str | None]:
    """The status of a finished loop, and why it is not approved."""
    draft = protocol.latest
    if protocol.approved:
        return Status.APPROVED, None
    if draft is None:
        return Status.STALLED, "the agent submitted no draft"
    if draft.round > rounds:
        return Status.UNAPPROVED, f"draft {draft.round} is over the budget of {rounds} round(s)"
    return Status.UNAPPROVED, (
        f"the review of draft {draft.round} ended with neither a rewrite nor an approval"
    )


async def run_session(
    protocol: CompressProtocol,
    model: Model,
    label: str,
    rounds: int,
    store: Store | None = None,
    *,
    system: str | None = None,
    request: Callable[[str], str] | None = None,
    agent: str = "compress",
    session_id: str | None = None,
) -> None:
    """Drive one file's session: the request turn, then review turns until a stop rule holds.

    Stops when there is no draft, when the last review produced neither a rewrite nor an
    approval (stall), when the newest draft is approved, or when it is over the ``rounds`` budget.
    At most ``1 + rounds`` turns are sent. Each model response is a usage row in ``store``
    (agent ``compress``); the turns are not stored: a file's drafts are no conversation for
    ``kernos sessions`` to list or continue, and would copy every source into the store.

    A compaction (:mod:`kernos.compress._compact`) runs the same loop with its own ``system``
    prompt, its own ``request`` turn (given the nonce), ``agent`` and ``session_id`` (its usage
    rows count under the session it compacts).
    """
    session = Session(
        model,
        method_text() if system is None else system,
        compress_tools(protocol),
        agent=agent,
        usage_store=store,
        session_id=session_id,
    )
    nonce = new_nonce(protocol.source)
    first = request_turn(label, protocol, nonce) if request is None else request(nonce)
    await session.prompt(first)
    while True:
        draft = protocol.latest
        if (
            draft is None
            or draft.round == protocol.reviewed
            or protocol.approved
            or draft.round > rounds
        ):
            return
        protocol.mark_reviewed(draft.round)
        await session.prompt(review_turn(protocol, draft, nonce, rounds))
