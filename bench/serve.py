"""``kernos mcp`` overhead: ``.venv/bin/python bench/serve.py``

``output_send__log`` (a file channel) called three ways, each ``CALLS`` times:

1. directly: ``call_tool(spec, args, ctx)`` on the served session (the boundary alone);
2. in process: an SDK ``Client`` on the server object (JSON-RPC over memory streams);
3. over stdio: an SDK ``Client`` on a ``kernos mcp`` subprocess.

Prints p50/p99 latency per call and the ratios to the direct call. Figures go in the issue, never
into a test.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from kernos._serve import KernosMcpServer
from kernos.boundary import ToolContext, call_tool
from kernos.runtime import Runtime

CALLS = 500
ARGS: dict[str, Any] = {"payload": ["bench line"], "type": "", "meta": None}
CONFIG = """
default_model = "openai-chat:bench"
[agents.main]
allowed_outputs = ["log"]
[channels.log]
kind = "file"
path = "out/log.jsonl"
"""


async def timed(call: Callable[[], Awaitable[Any]]) -> list[float]:
    for _ in range(20):  # warm up
        await call()
    samples = []
    for _ in range(CALLS):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return samples


def p(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100)[q - 1] * 1e6


async def main() -> None:
    where = Path(tempfile.mkdtemp(prefix="kernos-bench-serve-"))
    (where / "kernos.toml").write_text(CONFIG)
    os.environ.update(KERNOS_HOME=str(where / ".kernos"), OPENAI_API_KEY="bench-key")
    os.chdir(where)
    runtime = Runtime.open(where / "kernos.toml", cwd=where)
    served = KernosMcpServer(runtime)
    session = await served.session_for("bench")
    spec = session.tools["output_send__log"]
    ctx = ToolContext(session_id=session.session_id, extras={"session": session})

    async def direct() -> Any:
        return await call_tool(spec, ARGS, ctx)

    results: dict[str, list[float]] = {"direct call_tool": await timed(direct)}
    async with Client(served.server, mode="legacy") as client:

        async def in_process() -> Any:
            return await client.call_tool("output_send__log", ARGS)

        results["in-process MCP tools/call"] = await timed(in_process)
    kernos = str(Path(sys.executable).with_name("kernos"))
    env = dict(os.environ)
    params = StdioServerParameters(command=kernos, args=["mcp"], env=env, cwd=str(where))
    async with Client(params, mode="legacy") as client:

        async def stdio() -> Any:
            return await client.call_tool("output_send__log", ARGS)

        results["stdio MCP tools/call"] = await timed(stdio)
    await served.aclose()
    runtime.close()
    base = statistics.median(results["direct call_tool"])
    print(f"output_send__log, {CALLS} calls each")
    for name, samples in results.items():
        ratio = statistics.median(samples) / base
        p50, p99 = p(samples, 50), p(samples, 99)
        print(f"{name:28s} p50 {p50:8.0f} µs  p99 {p99:8.0f} µs  ×{ratio:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
