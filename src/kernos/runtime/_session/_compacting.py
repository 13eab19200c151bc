"""Compaction as a step of the session loop: right before a model request, the request is
measured; past ``compact_at`` of the window, the middle turns are summarised by the session's
:class:`Compactor` (the compress protocol, supplied from above: runtime does not know it) and the
model is sent the summary instead of them. The loop keeps every message (the store records them
all); only what is sent changes: it builds :func:`~kernos.runtime._rules._compaction.compacted_view`
itself. A compaction that is not approved stops the session with
:class:`~kernos.errors.ContextExhausted`: never a silent truncation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kernos.errors import ContextExhausted
from kernos.runtime._rules._compaction import (
    CompactSettings,
    Message,
    Summary,
    calibrated,
    head_end,
    needs_compaction,
    needs_count,
    render_transcript,
    request_size,
    span_to_compact,
    summary_text,
    turn_ends,
)
from kernos.runtime._session._compaction_store import record_compaction
from kernos.runtime._session._session_port import SessionPort, View
from kernos.runtime._trace._trace import span as trace_span


@dataclass(frozen=True)
class CompactOutcome:
    """How one summary run ended: ``status`` is ``approved``, ``unapproved`` or ``stalled``
    (the compress statuses; ``cancelled`` when it failed), with the approved ``text``, the
    newest draft's declared ``losses`` (``(content, reason)``), the drafts' count, the verdict,
    the model that wrote it and, when not approved, why."""

    status: str
    text: str = ""
    losses: tuple[tuple[str, str], ...] = ()
    drafts: int = 0
    verdict: str | None = None
    model: str | None = None
    reason: str | None = None

    @property
    def approved(self) -> bool:
        return self.status == "approved"


class Compactor(Protocol):
    """What writes a compaction's summary (``kernos.compress.TranscriptCompactor``)."""

    def count(self, text: str) -> int:
        """Offline tokens of ``text``."""
        ...

    async def summarize(
        self, transcript: str, first_turn: int, last_turn: int, settings: CompactSettings,
        session: SessionPort,
    ) -> CompactOutcome:  # fmt: skip
        """Summarise ``transcript`` (turns ``first_turn`` to ``last_turn``)."""
        ...


@dataclass
class Compacted:
    """One compaction a session did: the figures ``sessions show`` and a parent's notice read."""

    first_turn: int
    last_turn: int
    tokens_before: int
    tokens_after: int
    losses: int


class CompactionStep:
    """One session's compaction: its settings, its compactor and its calibration."""

    def __init__(self, session: SessionPort, settings: CompactSettings, compactor: Compactor):
        self.session = session
        self.settings = settings
        self.compactor = compactor
        #: the offline size of the last request sent, its length in characters, whether it was
        #: sent uncounted (:func:`~kernos.runtime._rules._compaction.needs_count`), and what the
        #: provider reported for it
        self.last_counted: int | None = None
        self.last_chars: int | None = None
        self.skipped = False
        self.last_reported: int | None = None
        #: the compactions this session did (in this process)
        self.done: list[Compacted] = []

    def reported(self, prompt_tokens: int) -> None:
        """The provider's ``prompt_tokens`` for the request last measured."""
        if prompt_tokens > 0:
            self.last_reported = prompt_tokens

    def measure(self, loop: View) -> tuple[int, int]:
        """``(offline, calibrated)`` size of the request the loop would send now."""
        counted = request_size(loop.wire(), loop.tools_text(), self.compactor.count)
        return counted, calibrated(counted, self.last_counted, self.last_reported)

    def _chars(self, loop: View) -> int:
        return len(json.dumps(loop.wire(), ensure_ascii=False)) + len(loop.tools_text())

    async def before_request(self, loop: View, *, force: bool = False) -> Compacted | None:
        """Compact when the next request crosses the threshold (``force``: whatever its size,
        ``kernos sessions compact``). Returns what was compacted (``None``: nothing).

        Raises:
            ContextExhausted: the compaction was not approved, or the request is over the
                whole window with nothing left to compact.
        """
        settings, session = self.settings, self.session
        chars = self._chars(loop)
        added = None if self.last_chars is None else chars - self.last_chars
        if not force and not needs_count(self.last_reported, added, settings):
            self.last_counted, self.last_chars, self.skipped = None, chars, True
            return None
        counted, size = self.measure(loop)
        if self.skipped and self.last_reported:
            # the last request, sent uncounted, is all in this one: at least its reported size
            size = max(size, self.last_reported)
        self.last_chars, self.skipped = chars, False
        if not force and not needs_compaction(size, settings):
            self.last_counted = counted
            return None
        covered = session.summary.last_turn if session.summary else 0
        span = span_to_compact(loop.messages, settings.keep_turns, covered)
        if span is None:
            self.last_counted = counted
            if not force and size >= settings.window:
                raise ContextExhausted(
                    f"the next request is about {size} tokens, over the model's "
                    f"{settings.window}-token context window, and no turn is left to compact "
                    f"(keep_turns = {settings.keep_turns}); lower keep_turns or start a new "
                    "session"
                )
            return None
        transcript = transcript_of(loop.messages, span.end, covered, session.summary)
        with trace_span(
            "kernos.compact", session_id=session.session_id, first_turn=span.first_turn,
            last_turn=span.last_turn, tokens_before=size,
        ) as traced:  # fmt: skip
            outcome = await self.compactor.summarize(
                transcript, span.first_turn, span.last_turn, settings, session
            )
            after = size
            if outcome.approved:
                session.summary = Summary(
                    span.first_turn, span.last_turn, outcome.text.strip(), outcome.losses
                )
                counted, after = self.measure(loop)
                self.last_counted, self.last_chars = counted, self._chars(loop)
            traced.set(
                status=outcome.status, tokens_after=after, drafts=outcome.drafts,
                losses=len(outcome.losses), model=outcome.model,
            )  # fmt: skip
        row = {
            "session_id": session.session_id,
            "agent": session.agent,
            "first_turn": span.first_turn,
            "last_turn": span.last_turn,
            "tokens_before": size,
            "tokens_after": after if outcome.approved else 0,
            "model": outcome.model,
            "drafts": outcome.drafts,
            "losses": [{"content": c, "reason": r} for c, r in outcome.losses],
            "status": outcome.status,
            "verdict": outcome.verdict,
            "summary": outcome.text if outcome.approved else None,
            "reason": outcome.reason,
        }
        if session.store is not None:
            record_compaction(session.store, row)
        session.emit("compaction", **row)
        if not outcome.approved:
            raise ContextExhausted(
                f"the next request is about {size} tokens, past compact_at {settings.at:g} of "
                f"the model's {settings.window}-token context window; compacting turns "
                f"{span.first_turn}–{span.last_turn} with {outcome.model} ended "
                f"{outcome.status} after {outcome.drafts} draft(s)"
                + (f" ({outcome.reason})" if outcome.reason else "")
                + "; raise the window, lower keep_turns, or set compact_model to a model "
                "that approves a summary"
            )
        done = Compacted(span.first_turn, span.last_turn, size, after, len(outcome.losses))
        self.done.append(done)
        return done


def transcript_of(
    messages: Sequence[Message], end: int, covered: int, earlier: Summary | None
) -> str:
    """The text the compressor summarises: the earlier summary (turns 1 to ``covered``), then
    the turns after it up to ``end``, rendered turn by turn."""
    if earlier is None or covered == 0:
        return render_transcript(messages[head_end(messages) : end])
    start = turn_ends(messages)[covered - 1]
    return (
        f"## Earlier summary of turns 1–{covered}\n{summary_text(earlier)}\n\n"
        + render_transcript(messages[start:end], first_turn=covered + 1)
    )


def compaction_figures(step: Any) -> tuple[int, int]:
    """``(compactions, declared losses)`` of a session's step (``(0, 0)`` without one)."""
    if step is None:
        return 0, 0
    return len(step.done), sum(c.losses for c in step.done)
