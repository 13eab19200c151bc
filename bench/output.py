"""Output kernel throughput: ``.venv/bin/python bench/output.py``.

1. Items per second through the whole call path — parse, gate, and every stage of ``send_one`` —
   to a no-op channel, for calls of 1, 20 and 1,000 items.
2. The per-item cost of ``send_one`` (before_output, safe backfill, handler, after_output; no hooks
   installed) against awaiting the handler directly with the same context: the whole call as a
   ratio, and the overhead (send_one minus direct) as a multiple of a direct call.
   Target: stage overhead ≤ 2x a direct handler call.

Each figure is the best of several rounds, to keep other processes' noise out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from kernos.output import Channel, OutputContext, OutputItem, OutputKernel

ROUNDS = 7


async def noop(item: OutputItem, ctx: OutputContext) -> None:
    return None


async def best_of(run: Callable[[], Awaitable[None]]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        await run()
        best = min(best, time.perf_counter() - start)
    return best


async def main() -> None:
    channel = Channel("noop", noop)
    kernel = OutputKernel([channel], max_items=1000)
    print("items per second through parse + gate + stages (no-op channel):")
    for size in (1, 20, 1000):
        payload: str | list[str] = "x" if size == 1 else ["x"] * size
        calls = max(1, 20_000 // size)

        async def calls_of(payload: str | list[str] = payload, calls: int = calls) -> None:
            for _ in range(calls):
                await kernel.send("noop", payload, "text", '{"to": 1}')

        seconds = await best_of(calls_of)
        rate = calls * size / seconds
        per_call = seconds / calls * 1e6
        print(f"  {size:>5}-item calls: {rate:>12,.0f} items/s  ({per_call:,.1f} µs/call)")

    n = 50_000
    item = OutputItem("x")

    async def direct() -> None:
        for index in range(n):
            await noop(item, OutputContext("noop", "main", index, n, None, None))

    async def staged() -> None:
        for index in range(n):
            await kernel.send_one(
                channel, item, OutputContext("noop", "main", index, n, None, None)
            )

    direct_s = await best_of(direct)
    staged_s = await best_of(staged)
    overhead = (staged_s - direct_s) / direct_s
    print("per item, send_one's stages vs awaiting the handler directly (same context):")
    print(f"  direct handler call: {direct_s / n * 1e9:,.0f} ns")
    print(f"  send_one (stages):   {staged_s / n * 1e9:,.0f} ns")
    print(f"  send_one / direct:   {staged_s / direct_s:.2f}x")
    verdict = "within" if overhead <= 2.0 else "ABOVE"
    print(f"  stage overhead:      {overhead:.2f}x a direct call ({verdict} the 2x target)")


if __name__ == "__main__":
    asyncio.run(main())
