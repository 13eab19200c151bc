"""Compaction's summaries, written through the compress protocol: the transcript of a session's
middle turns is the source, ``compact.md`` the system prompt, and the rest is ``kernos compress``'s
own loop (:func:`kernos.compress._session.run_session`): ``rewrite`` with declared losses, a review
turn per draft, ``approve``, nonce-wrapped source, a round budget. The session loop that decides
when to compact is the runtime's (:mod:`kernos.runtime._session._compacting`); this is the
:class:`~kernos.runtime.Compactor` it is handed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

from kernos.compress._protocol import CompressProtocol
from kernos.compress._session import Status, outcome, run_session
from kernos.compress._tokens import count_o200k
from kernos.compress._tools import read_text
from kernos.compress._turns import quote
from kernos.runtime import CompactOutcome, CompactSettings, ModelTarget, Store, model_failure

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from kernos.runtime import SessionPort

#: the agent name compaction's model responses are counted under (``kernos usage --by agent``)
COMPACT_AGENT = "compact"


@cache
def compact_text() -> str:
    """The compaction agent's system prompt."""
    return read_text("compact.md").strip()


def compact_request(
    protocol: CompressProtocol, first: int, last: int, label: str, nonce: str
) -> str:
    """The request turn: which turns, the transcript's size, how to read the block, the block."""
    tag = f"source-{nonce}"
    return (
        read_text("compact_request.md")
        .strip()
        .format(
            first=first,
            last=last,
            label=label,
            words=protocol.source_words,
            tokens=protocol.source_tokens,
            tag=tag,
            block=quote(protocol.source, tag),
        )
    )


class TranscriptCompactor:
    """Summaries of a session's turns through the compress protocol.

    Args:
        resolve: a model name (``compact_model``) to its model; ``None`` for the name means the
            session's own model is used instead.
        store: where the summary requests are counted (usage rows, agent ``compact``);
            ``None``: where the compacted session counts its own.
        count: the offline token count (``o200k_base``).
    """

    def __init__(
        self,
        resolve: Callable[[str], Model],
        store: Store | None = None,
        count: Callable[[str], int] = count_o200k,
    ) -> None:
        self._resolve = resolve
        self._store = store
        self._count = count

    def count(self, text: str) -> int:
        return self._count(text)

    async def summarize(
        self,
        transcript: str,
        first_turn: int,
        last_turn: int,
        settings: CompactSettings,
        session: SessionPort,
    ) -> CompactOutcome:
        model = session.model if settings.model is None else self._resolve(settings.model)
        protocol = CompressProtocol(transcript, tokenizer=self._count)
        label = f"session {session.session_id}, agent {session.agent}"
        try:
            await run_session(
                protocol,
                model,
                label,
                settings.rounds,
                self._store if self._store is not None else session.usage_store,
                system=compact_text(),
                request=lambda nonce: compact_request(
                    protocol, first_turn, last_turn, label, nonce
                ),
                agent=COMPACT_AGENT,
                session_id=session.session_id,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a provider error: the compaction failed, said so
            failure = model_failure(exc, ModelTarget(model.model_name, model.base_url))
            said = failure.line if failure is not None else f"{type(exc).__name__}: {exc}"
            return CompactOutcome(
                Status.CANCELLED.value, drafts=protocol.rounds, model=model.model_name, reason=said
            )
        status, error = outcome(protocol, settings.rounds)
        draft = protocol.latest
        return CompactOutcome(
            status.value,
            text=draft.text if draft is not None and status is Status.APPROVED else "",
            losses=tuple((x.content, x.reason) for x in draft.losses) if draft else (),
            drafts=protocol.rounds,
            verdict=protocol.verdict,
            model=model.model_name,
            reason=error,
        )
