"""The usage table on each store kernos supports: recorded per model response, read back with the
task each child session belongs to (a join with the tasks table)."""

from __future__ import annotations

import time

from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.usage import RequestUsage

from kernos.cli._usage_store import usage_rows
from kernos.runtime import Store
from kernos.runtime._usage import response_usage
from kernos.runtime._usage_log import record_usage
from kernos.tasks import TaskStore


def response(inp: int, out: int, cached: int = 0) -> ModelResponse:
    usage = RequestUsage(input_tokens=inp, output_tokens=out, cache_read_tokens=cached)
    return ModelResponse(parts=[TextPart("ok")], usage=usage, model_name="gpt-4o")


def test_usage_rows_are_stored_and_joined_with_their_task(store_target: str) -> None:
    store = Store(store_target)
    tasks = TaskStore(store)
    tasks.insert({"id": "t_00000001", "parent_session": "s_main", "child_session": "s_child",
                  "target_kind": "agent", "target": "explore", "model": "openai-chat:gpt-4o",
                  "status": "completed", "residency": "disposed",
                  "created_at": time.time()})  # fmt: skip
    record_usage(store, "s_main", "main", response_usage([response(100, 20)]), [None])
    record_usage(store, "s_child", "explore", response_usage([response(50, 5, 30)]), ["r:1"])
    # a durable run's replay reports its responses again, under the same keys: kept once
    record_usage(store, "s_child", "explore", response_usage([response(50, 5, 30)]), ["r:1"])
    rows = usage_rows(store, since=time.time() - 60)
    assert [
        (r["session_id"], r["task_id"], r["input_tokens"], r["cached_tokens"]) for r in rows
    ] == [
        ("s_main", None, 100, 0),
        ("s_child", "t_00000001", 50, 30),
    ]
    assert all(isinstance(r["cost"], float) and r["cost"] > 0 for r in rows)
    assert usage_rows(store, since=time.time() + 60) == []
    store.close()
