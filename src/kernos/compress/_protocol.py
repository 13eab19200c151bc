"""The compress protocol: drafts, reviews and approval as a pure state machine.

No I/O. The command drives it: ``submit`` from the ``rewrite`` tool, ``mark_reviewed`` when a
review turn is sent, ``accept`` from the ``approve`` tool. Correctness rests on two rules kept
here: a draft is approved only after it was shown back in a review turn, and a new draft cancels
any approval.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from kernos.compress._tokens import Tokenizer, token_counter
from kernos.errors import CompressError as CompressError


@dataclass(frozen=True)
class Loss:
    """One deliberate loss: what was dropped (quoted or named) and why the text is still correct."""

    content: str
    reason: str


class _LossLike(Protocol):
    @property
    def content(self) -> str: ...

    @property
    def reason(self) -> str: ...


@dataclass(frozen=True)
class Draft:
    """One submitted draft; ``round`` counts from 1."""

    round: int
    text: str
    losses: tuple[Loss, ...]


@dataclass(frozen=True)
class Metrics:
    """A draft measured against its source; ``ratio`` is negative when the draft grew."""

    source_words: int
    draft_words: int
    source_tokens: int
    draft_tokens: int
    ratio: float

    @property
    def percent(self) -> str:
        """``ratio`` as a percentage with one decimal (``"37.5"``, ``"-4.0"``)."""
        return format_percent(self.ratio)


def format_percent(ratio: float) -> str:
    value = round(ratio * 100, 1)
    return f"{0.0 if value == 0 else value:.1f}"


def count_words(text: str) -> int:
    """Whitespace-separated pieces of the trimmed text; 0 when blank."""
    return len(text.split())


def shrink_ratio(source_tokens: int, draft_tokens: int) -> float:
    """``(source - draft) / source``; 0 for an empty source."""
    if source_tokens == 0:
        return 0.0
    return (source_tokens - draft_tokens) / source_tokens


class CompressProtocol:
    """Bookkeeping for one file's run.

    Args:
        source: the text being compressed; its size is measured once, here.
        tokenizer: ``"o200k"`` (exact, offline) or ``"bytes"`` (ceil(UTF-8 bytes / 4)), or any
            ``str -> int`` counting function.
    """

    def __init__(
        self, source: str, *, tokenizer: Tokenizer | str | Callable[[str], int] = Tokenizer.O200K
    ) -> None:
        self.source = source
        self._count = tokenizer if callable(tokenizer) else token_counter(tokenizer)
        self._source_words = count_words(source)
        self._source_tokens = self._measure(source)
        self._drafts: list[Draft] = []
        self._reviewed = 0
        self._approved = False
        self._verdict: str | None = None

    def _measure(self, text: str) -> int:
        """Tokens of ``text``; a blank text counts 0, like its 0 words."""
        return self._count(text) if text.strip() else 0

    # -- state -------------------------------------------------------------------------------
    @property
    def drafts(self) -> tuple[Draft, ...]:
        return tuple(self._drafts)

    @property
    def latest(self) -> Draft | None:
        """The newest draft, or ``None`` before the first ``rewrite``."""
        return self._drafts[-1] if self._drafts else None

    @property
    def rounds(self) -> int:
        """How many drafts were submitted."""
        return len(self._drafts)

    @property
    def reviewed(self) -> int:
        """The highest draft round shown back in a review turn (0: none)."""
        return self._reviewed

    @property
    def approved(self) -> bool:
        return self._approved

    @property
    def verdict(self) -> str | None:
        return self._verdict

    @property
    def source_words(self) -> int:
        return self._source_words

    @property
    def source_tokens(self) -> int:
        return self._source_tokens

    # -- transitions -------------------------------------------------------------------------
    def submit(self, text: str, losses: Iterable[_LossLike]) -> Draft:
        """Record a new draft. Losses are copied; any earlier approval is cancelled."""
        draft = Draft(
            round=len(self._drafts) + 1,
            text=text,
            losses=tuple(Loss(loss.content, loss.reason) for loss in losses),
        )
        self._drafts.append(draft)
        self._approved = False
        self._verdict = None
        return draft

    def mark_reviewed(self, round: int) -> None:
        """Draft ``round`` was shown back to the agent in a review turn."""
        self._reviewed = max(self._reviewed, round)

    def accept(self, verdict: str) -> Draft:
        """Approve the newest draft with ``verdict``.

        Raises:
            CompressError: there is no draft, or the newest draft has not been reviewed yet.
        """
        draft = self.latest
        if draft is None:
            raise CompressError("Call rewrite before approve: there is no draft to accept")
        if draft.round > self._reviewed:
            raise CompressError(
                f"Draft {draft.round} has not been reviewed yet. End this turn; the review turn "
                "arrives next, and you approve there."
            )
        self._approved = True
        self._verdict = verdict
        return draft

    # -- measuring ---------------------------------------------------------------------------
    def metrics(self, draft: Draft) -> Metrics:
        """``draft`` measured against the source."""
        draft_tokens = self._measure(draft.text)
        return Metrics(
            source_words=self._source_words,
            draft_words=count_words(draft.text),
            source_tokens=self._source_tokens,
            draft_tokens=draft_tokens,
            ratio=shrink_ratio(self._source_tokens, draft_tokens),
        )
