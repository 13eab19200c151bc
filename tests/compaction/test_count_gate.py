"""A session on a model with a window counts its request offline only once it could be near the
threshold (runtime/_rules/_compaction.py ``needs_count``): the first request always, then only once
the provider's last reported size plus the characters added since reaches half the threshold; a
single large tool result after small requests is still counted, and compacted."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from kernos.boundary import ToolContext, ToolResult, ToolSpec
from kernos.compress import TranscriptCompactor
from kernos.runtime import CompactSettings, Config, Session, resolve_model
from kernos.runtime._rules._compaction import COUNT_FROM, needs_count
from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.compaction.test_e2e import SUMMARY, compactor, words, worker

SETTINGS = CompactSettings(window=10_000, keep_turns=0)  # threshold 8000, counted from 4000


def test_the_first_request_is_always_counted() -> None:
    assert needs_count(None, None, SETTINGS)
    assert needs_count(None, 10, SETTINGS)
    assert needs_count(0, 10, SETTINGS)  # a provider that reports no size: always counted


def test_a_request_is_counted_once_its_upper_bound_reaches_the_lower_threshold() -> None:
    lower = int(SETTINGS.threshold * COUNT_FROM)
    assert lower == 4000
    assert not needs_count(1000, 2999, SETTINGS)
    assert needs_count(1000, 3000, SETTINGS)  # the characters added since count too
    assert needs_count(4000, 0, SETTINGS)  # the provider's own size alone
    assert not needs_count(3999, -500, SETTINGS)  # a smaller request (compacted) adds nothing


class _Page(BaseModel):
    n: int = 0


@pytest.mark.asyncio
async def test_small_requests_go_uncounted_and_a_large_result_is_counted_and_compacted(
    openai_env: FakeOpenAIServer,
) -> None:
    pages = {0: "a short page", 1: "another short page", 2: words(7, count=6000)}

    async def read_page(params: _Page, ctx: ToolContext) -> ToolResult:
        return ToolResult(f"page {params.n}: {pages[params.n]}")

    tool = ToolSpec(name="read_page", description="Read a page.", params=_Page, execute=read_page)
    openai_env.script(
        *(tool_call("read_page", {"n": n}, when=worker) for n in range(3)),
        text("All read.", when=worker),
        tool_call("rewrite", {"text": SUMMARY, "losses": []}, when=compactor),
        text("Draft submitted.", when=compactor),
        tool_call("approve", {"verdict": "keeps the task"}, when=compactor),
    )
    session = Session(resolve_model("openai-chat:x", Config()), "", [tool])
    session.set_compaction(SETTINGS, TranscriptCompactor(lambda name: session.model))
    step = session.compacting
    assert step is not None
    measured: list[int] = []
    measure = step.measure

    def measuring(loop: Any) -> tuple[int, int]:
        sizes = measure(loop)
        measured.append(sizes[0])
        return sizes

    step.measure = measuring  # type: ignore[method-assign]
    await session.prompt("Read pages 0, 1 and 2.")
    openai_env.assert_all_consumed()
    # requests 1–4 of the worker: the first counted, the two small ones not, the large one
    # counted (its page alone is past the threshold), compacted and counted again after
    assert len(measured) == 3
    assert measured[0] < SETTINGS.threshold * COUNT_FROM <= SETTINGS.threshold <= measured[1]
    assert measured[2] < SETTINGS.threshold
    assert len(step.done) == 1
    assert step.done[0].tokens_before >= SETTINGS.threshold
    work = [r for r in openai_env.requests if worker(r)]
    assert len(work) == 4
    assert SUMMARY in str(work[-1]["messages"])
