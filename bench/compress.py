"""Benchmark `kernos compress`: concurrency against the ideal, and token-counting throughput.

A scripted agent with a fixed latency per model turn (pydantic-ai ``FunctionModel`` sleeping
``--latency`` seconds) compresses ``--files`` files in place at each ``-n``. Each file takes three
model turns (rewrite; end of turn; approve at review), so the ideal wall time is
``files × 3 × latency / n``; the ratio measured / ideal is the overhead of kernos itself, and
``cpu ms/turn`` is the process CPU time spent per model turn (the agent loop, the tools, the
token counts, the writes): once ``n`` turns' CPU exceeds one turn's latency, the loop is CPU-bound.

    .venv/bin/python bench/compress.py                # 200 files, 50 ms, -n 1 4 16 64
    .venv/bin/python bench/compress.py --agents 16    # one setting
    .venv/bin/python bench/compress.py --model function http --agents 16 64

``--model function`` (the default) is the in-process ``FunctionModel`` above, asked through
pydantic-ai's model interface (``runtime/_models/_model_adapter.py``). ``http`` puts the same script
behind a ``FakeOpenAIServer`` in a separate process (its ``delay`` the latency) and runs an
``openai-chat`` model over the pooled wire, so the measured CPU is kernos's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _http import http_model, served

from kernos.compress import Status, compress_files, count_bytes, count_o200k, method_text

TURNS_PER_FILE = 3


def scripted_agent(latency: float) -> FunctionModel:
    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(latency)
        part = messages[-1].parts[-1]
        if isinstance(part, ToolReturnPart):
            return ModelResponse(parts=[TextPart("Draft submitted.")])
        content = part.content if isinstance(part, UserPromptPart) else ""
        if isinstance(content, str) and content.startswith("Review of draft"):
            return ModelResponse(parts=[ToolCallPart("approve", {"verdict": "Stands alone."})])
        draft = {"text": "Answer politely. Timeout: default 30s.", "losses": []}
        return ModelResponse(parts=[ToolCallPart("rewrite", draft)])

    return FunctionModel(answer, model_name="scripted")


async def concurrency_run(
    files: int, agents: int, latency: float, model: Any = None
) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(files):
            path = Path(tmp) / f"prompt{i:03}.md"
            path.write_text(
                f"Prompt {i}. You are a helpful assistant. Please make sure that you always "
                "answer politely. The timeout defaults to 30 seconds.\n"
            )
            paths.append(path)
        started, cpu = time.perf_counter(), time.process_time()
        reports = await compress_files(
            paths, model=model or scripted_agent(latency), agents=agents, in_place=True
        )
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert all(r.status is Status.APPROVED for r in reports), "a scripted file was not approved"
    return elapsed, cpu


def throughput(count: object, text: str, repeat: int = 3) -> float:
    size = len(text.encode("utf-8")) / 1e6
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        count(text)  # type: ignore[operator]
        best = min(best, time.perf_counter() - started)
    return size / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per model turn")
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--model", nargs="+", default=["function"], choices=["function", "http"])
    args = parser.parse_args()

    count_o200k("warm up")  # build the vocabulary once, outside the timings
    print(
        f"compress_files: {args.files} files, {TURNS_PER_FILE} model turns each, "
        f"{args.latency * 1000:.0f} ms per turn"
    )
    print(f"{'model':<12} {'-n':>4} {'wall s':>8} {'ideal s':>8} {'ratio':>6} {'cpu ms/turn':>12}")
    http = set(args.model) - {"function"}
    with served("compress", args.latency) if http else nullcontext("") as base_url:
        for agents in args.agents:
            for engine in args.model:  # interleaved: every model once per setting
                model = None
                if engine != "function":
                    model = http_model(base_url)
                wall, cpu = asyncio.run(concurrency_run(args.files, agents, args.latency, model))
                ideal = args.files * TURNS_PER_FILE * args.latency / agents
                per_turn = cpu * 1000 / (args.files * TURNS_PER_FILE)
                print(
                    f"{engine:<12} {agents:>4} {wall:>8.2f} {ideal:>8.2f} {wall / ideal:>6.2f} "
                    f"{per_turn:>12.2f}"
                )

    sample = (method_text() + "\n" + "压缩是重新编码，而不是删除词语。" * 40 + "\n") * 200
    print(f"\ntoken counting over {len(sample.encode('utf-8')) / 1e6:.1f} MB of mixed text:")
    print(f"  o200k_base  {throughput(count_o200k, sample):8.1f} MB/s")
    print(f"  bytes / 4   {throughput(count_bytes, sample):8.1f} MB/s")


if __name__ == "__main__":
    main()
