"""What the model reads after a send. Pure.

The single path answers exactly ``ok`` on success: a richer receipt makes models keep sending.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from kernos.output._channel import SendStatus

if TYPE_CHECKING:
    from kernos.boundary import ToolResult

RESEND_LINE = "Resend only the failed items."


class ItemOutcome(NamedTuple):
    """How one item ended: ``text`` is the handler's error (failed) or note (unconfirmed).

    A named tuple: immutable (an ``after_output`` hook cannot change it) and cheap to make once
    per item.
    """

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose
    type: str
    status: SendStatus
    text: str = ""

    @property
    def confirmed(self) -> bool:
        return self.status is SendStatus.SENT

    def record(self) -> dict[str, Any]:
        """The item as the tool result's details and ``kernos send --json`` give it."""
        status = self.status.value
        return {"index": self.index, "type": self.type, "status": status, "text": self.text}

    def line(self) -> str:
        if self.status is SendStatus.SENT:
            return f"[{self.index}] {self.type} ok"
        if self.status is SendStatus.FAILED:
            return f"[{self.index}] {self.type} failed: {self.text}"
        return f"[{self.index}] {self.type} unconfirmed: {self.text or self.status.value}"


def render_receipt(channel: str, outcomes: Sequence[ItemOutcome], *, single: bool) -> str:
    """The receipt text for a call that passed parsing and the gate."""
    if single:
        (only,) = outcomes
        if only.status is SendStatus.SENT:
            return "ok"
        if only.status is SendStatus.FAILED:
            return f"sending via [{channel}] failed: {only.text}"
        return f"sending via [{channel}] unconfirmed: {only.text or only.status.value}"
    total = len(outcomes)
    sent = sum(1 for o in outcomes if o.status is SendStatus.SENT)
    if sent == total:
        return f"sent {total} message{'' if total == 1 else 's'} via [{channel}]"
    lines = [f"sent {sent}/{total} messages via [{channel}]:"]
    lines.extend(o.line() for o in outcomes)
    if any(o.status is SendStatus.FAILED for o in outcomes):
        lines.append(RESEND_LINE)
    return "\n".join(lines)


@dataclass(frozen=True)
class OutputReceipt:
    """The result of one call: the text the model reads and what happened to each item.

    ``code`` is set (and ``items`` empty) when the call was rejected before any item was sent.
    """

    channel: str
    text: str
    items: tuple[ItemOutcome, ...] = ()
    code: str | None = None
    single: bool = True

    @classmethod
    def of(cls, channel: str, outcomes: Sequence[ItemOutcome], *, single: bool) -> OutputReceipt:
        """The receipt of a call whose items went out with ``outcomes`` (``single``: the call
        sent one string, not a list)."""
        rendered = render_receipt(channel, outcomes, single=single)
        return cls(channel, rendered, tuple(outcomes), single=single)

    def __str__(self) -> str:
        return self.text

    @property
    def rejected(self) -> bool:
        return self.code is not None

    @property
    def sent(self) -> int:
        """How many items were confirmed sent."""
        return sum(1 for o in self.items if o.status is SendStatus.SENT)

    @property
    def total(self) -> int:
        return len(self.items)

    @property
    def all_sent(self) -> bool:
        return not self.rejected and self.sent == self.total

    def to_tool_result(self) -> ToolResult:
        """The tool result: the text, with the code (rejections) or per-item outcomes in details."""
        from kernos.boundary import ToolResult  # the tool pipeline: `kernos channels` needs none

        if self.rejected:
            return ToolResult(
                self.text,
                {"code": self.code, "stage": "semantic", "channel": self.channel},
                is_error=True,
            )
        details: dict[str, Any] = {
            "channel": self.channel,
            "sent": self.sent,
            "total": self.total,
            "items": [o.record() for o in self.items],
        }
        if any(o.status is SendStatus.FAILED for o in self.items):
            details["code"] = "send_failed"
        return ToolResult(self.text, details, is_error="code" in details)
