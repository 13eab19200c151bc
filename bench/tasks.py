"""Benchmark of the task subsystem (not a test): ``.venv/bin/python bench/tasks.py``.

1. Per-call boundary cost of ``task`` (normalize + schema validation + resolve) against pydantic
   validation alone of the same arguments once normalized (raw padded arguments are not what the
   schema is meant to see), as a ratio (target ≤ 1.5×). Both sides run in the same process,
   interleaved, and the reported figure is the median of several rounds, each the best of a
   repeat; validation of the raw arguments is shown for reference only.
2. Time and peak memory to run 1,000 background children to completion with an instant scripted
   model (pydantic-ai ``FunctionModel``), through the real tool, manager and SQLite store
   (targets < 10 s, < 300 MB). ``--http`` runs it again with an
   ``openai-chat`` model over HTTP, the server (answering ``done`` at once) in a
   process of its own (``bench/_http.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import timeit
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tasks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _http import http_model, served
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tasks_helpers import S1, S2, S3

from kernos.boundary import ToolContext, call_tool
from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskArgs, TaskManager, normalize_task_arguments
from kernos.tasks import resolve_spawn_items as resolve

CLEAN = {"prompt": "TASK: Audit the boundary.", "subagent_type": "explore", "name": "audit"}
CATEGORIES, AGENTS, TOOLS = ("quick",), ("explore",), ("read",)


ROUNDS, REPEAT, NUMBER = 5, 5, 10_000


def per_call(fn: Any) -> float:
    return min(timeit.repeat(fn, number=NUMBER, repeat=REPEAT)) / NUMBER


def boundary_overhead() -> None:
    print(f"1. per-call boundary cost (µs; median of {ROUNDS} rounds, each best of "
          f"{REPEAT} × {NUMBER:,} calls)")  # fmt: skip
    print(f"   {'case':<14}{'raw validate':>14}{'validate':>10}"
          f"{'normalize+validate+resolve':>28}{'ratio':>8}")  # fmt: skip
    expected = {"S1 padded": "ok", "S2 batch": "ok", "S3 ambiguous": "error", "clean": "ok"}
    for name, raw in (("S1 padded", S1), ("S2 batch", S2), ("S3 ambiguous", S3), ("clean", CLEAN)):
        # The baseline validates exactly what the boundary validates: the normalized arguments
        # (computed once, outside the timing). Raw validation is only printed for reference.
        normalized = normalize_task_arguments(raw)
        resolution = resolve(
            TaskArgs.model_validate(normalized), categories=CATEGORIES, agents=AGENTS, tools=TOOLS
        )
        assert resolution.kind == expected[name], (name, resolution)

        def raw_validate(raw: dict[str, Any] = raw) -> None:
            TaskArgs.model_validate(raw)

        def plain(normalized: dict[str, Any] = normalized) -> None:
            TaskArgs.model_validate(normalized)

        def boundary(raw: dict[str, Any] = raw) -> None:
            params = TaskArgs.model_validate(normalize_task_arguments(raw))
            resolve(params, categories=CATEGORIES, agents=AGENTS, tools=TOOLS)

        bases, ours, ratios = [], [], []
        for _ in range(ROUNDS):  # interleaved, so load from elsewhere hits both sides alike
            base, full = per_call(plain), per_call(boundary)
            bases.append(base)
            ours.append(full)
            ratios.append(full / base)
        raw_base = per_call(raw_validate)
        base, full, ratio = (statistics.median(v) for v in (bases, ours, ratios))
        print(f"   {name:<14}{raw_base * 1e6:>14.2f}{base * 1e6:>10.2f}"
              f"{full * 1e6:>28.2f}{ratio:>7.2f}×")  # fmt: skip


async def instant(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("done")])


async def thousand_children(
    count: int = 1000, trace: bool = False, model: Any = None, label: str = "FunctionModel"
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "kernos.toml").write_text(
            'default_model = "fn"\n[categories.quick]\ndescription = "q"\n', encoding="utf-8"
        )
        os.environ["KERNOS_HOME"] = str(home / ".kernos")
        runtime = Runtime(load_config(cwd=home))
        model = model or FunctionModel(instant)
        runtime.model = lambda name: model  # type: ignore[method-assign]
        manager = TaskManager(runtime)
        session = runtime.session("main", record_turns=False, instructions="")
        session.add_tools(manager.tools_for(session))
        spec = session.tools["task"]
        ctx = ToolContext(extras={"session": session})
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if trace:
            tracemalloc.start()
        started = time.perf_counter()
        left = count
        while left:
            size = min(16, left)
            items = [{"prompt": f"child {left - i}", "model": "", "name": ""} for i in range(size)]
            args = {"run_in_background": True, "category": "quick", "prompt": "", "tasks": items}
            result = await call_tool(spec, json.dumps(args), ctx)
            assert not result.is_error, result.text
            left -= size
        await manager.wait_all()
        await manager.aclose(wait=True)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory() if trace else (0, 0)
        tracemalloc.stop()
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        done = sum(1 for r in manager.records.values() if r.status == "completed")
        notices = session.take_queued() or ""
        runtime.close()
    concurrency = manager.config.tasks.concurrency
    print(f"2. {count} background children ({label}, concurrency {concurrency}/model)")
    woken = notices.count("task completion")
    print(f"   completed: {done}/{count}; completion notices queued: {woken}")
    traced = f"peak traced {peak / 2**20:.1f} MB (tracemalloc on); " if trace else ""
    print(f"   wall time: {elapsed:.2f} s" + (" (slowed by tracemalloc)" if trace else ""))
    print(f"   memory: {traced}max RSS {rss_after / 1024:.0f} MB "
          f"(was {rss_before / 1024:.0f} MB before)")  # fmt: skip


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="again over HTTP (bench/_http.py)")
    args = parser.parse_args()
    boundary_overhead()
    asyncio.run(thousand_children())
    asyncio.run(thousand_children(trace=True))
    if args.http:
        with served("done") as base_url:
            label = "openai-chat over HTTP"
            asyncio.run(thousand_children(model=http_model(base_url), label=label))
