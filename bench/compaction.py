"""Compaction over a long scripted session: ``.venv/bin/python bench/compaction.py``.

One lean session on ``kernos.testing.FakeOpenAIServer`` (an instant model that also plays the
compressor: ``rewrite``, then ``approve`` at the review) makes ``--turns`` tool calls (default 200),
each returning about ``--result`` tokens (default 400), then answers. It runs twice: without
compaction, and with a ``--window`` (default 16,000 tokens, ``compact_at`` 0.8, ``keep_turns`` 4).

Figures: the prompt tokens sent over the whole session (the server's count: ~4 characters a
token), the largest single request, how many compactions ran, and the added wall time per
compaction (its summary requests plus the offline counting, with an instant model: kernos's own
cost). Read them as orders of magnitude; the model's real latency is not in them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kernos.boundary import ToolContext, ToolResult, ToolSpec
from kernos.compress import TranscriptCompactor
from kernos.runtime import CompactSettings, Config, Session, Store, resolve_model
from kernos.testing import FakeOpenAIServer, text, tool_call

COMPACTOR = "Compacting an agent's session"


class _Page(BaseModel):
    n: int = 0


def _is_compactor(request: dict[str, Any]) -> bool:
    first = request["messages"][0]
    return first["role"] == "system" and COMPACTOR in str(first["content"])


def _compactor_at(step: str) -> Any:
    def check(request: dict[str, Any]) -> bool:
        if not _is_compactor(request):
            return False
        last = request["messages"][-1]
        review = last["role"] == "user" and "Review of draft" in str(last["content"])
        return {"tool": last["role"] == "tool", "review": review}.get(
            step, last["role"] == "user" and not review
        )

    return check


async def _run(turns: int, result_tokens: int, window: int | None) -> dict[str, Any]:
    pick = random.Random(1)
    page = " ".join(
        "".join(pick.choice("abcdefghij") for _ in range(3)) for _ in range(result_tokens)
    )

    async def read_page(params: _Page, ctx: ToolContext) -> ToolResult:
        return ToolResult(f"page {params.n}: {page}")

    tool = ToolSpec(name="read_page", description="Read a page.", params=_Page, execute=read_page)
    with FakeOpenAIServer() as server, tempfile.TemporaryDirectory() as home:
        os.environ.update(server.env())
        worker = [
            tool_call("read_page", {"n": i}, when=lambda r: not _is_compactor(r))
            for i in range(turns)
        ]
        server.script(
            *worker,
            text("done", when=lambda r: not _is_compactor(r)),
            tool_call(
                "rewrite",
                {"text": "I read pages in order; next: the following page.", "losses": []},
                when=_compactor_at("request"),
                repeat=True,
            ),
            text("Drafted.", when=_compactor_at("tool"), repeat=True),
            tool_call(
                "approve", {"verdict": "keeps the task"}, when=_compactor_at("review"), repeat=True
            ),
        )
        store = Store(Path(home) / "kernos.db")
        session = Session(resolve_model("openai-chat:x", Config()), "", [tool], store=store)
        spent: list[float] = []
        if window is not None:
            compactor = TranscriptCompactor(lambda name: session.model)
            original = compactor.summarize

            async def timed(*args: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await original(*args)
                finally:
                    spent.append(time.perf_counter() - started)

            compactor.summarize = timed  # type: ignore[method-assign]
            session.set_compaction(CompactSettings(window=window), compactor)
        started = time.perf_counter()
        await session.prompt("Read every page in order.")
        wall = time.perf_counter() - started
        work = [r for r in server.requests if not _is_compactor(r)]
        sizes = [
            len("".join(str(m.get("content") or "") for m in r["messages"])) // 4 for r in work
        ]
        store.close()
        return {
            "requests": len(work),
            "tokens_sent": sum(sizes),
            "largest": max(sizes),
            "compactions": len(spent),
            "ms_per_compaction": 1000 * sum(spent) / len(spent) if spent else 0.0,
            "wall_s": wall,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--result", type=int, default=400)
    parser.add_argument("--window", type=int, default=16_000)
    args = parser.parse_args()
    for label, window in (("without", None), ("with", args.window)):
        figures = asyncio.run(_run(args.turns, args.result, window))
        print(
            f"{label:>8} compaction: {figures['requests']} requests, "
            f"{figures['tokens_sent']:,} prompt tokens sent, largest {figures['largest']:,}, "
            f"{figures['compactions']} compaction(s), "
            f"{figures['ms_per_compaction']:.0f} ms each, {figures['wall_s']:.1f}s wall"
        )


if __name__ == "__main__":
    main()
