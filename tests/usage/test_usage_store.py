"""The usage table on each store kernos supports: recorded per model response, read back with the
task each child session belongs to (a join with the tasks table)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.usage import RequestUsage

from kernos.boundary import ToolContext, ToolError, ToolResult, ToolSpec
from kernos.cli._usage_store import call_rows, usage_rows
from kernos.runtime import Config, Session, SessionEvent, Store, resolve_model
from kernos.runtime._session._usage import response_usage
from kernos.runtime._session._usage_log import record_call, record_usage
from kernos.runtime._store._store import USAGE_MIGRATIONS
from kernos.tasks import TaskStore
from kernos.testing import FakeOpenAIServer, text, tool_call, tool_calls


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


class PickParams(BaseModel):
    key: str


class Pick:
    """A tool whose ``forbidden`` and ``banned`` keys are rejected (``usage_calls`` rows); with
    ``late`` set, a call that is not rejected finishes only after a ``banned`` one was validated."""

    def __init__(self) -> None:
        self.late = False
        self.rejected = asyncio.Event()

    def validate(self, params: PickParams) -> ToolError | None:
        if params.key not in ("forbidden", "banned"):
            return None
        if params.key == "banned":
            self.rejected.set()
        return ToolError("forbidden_key", f"{params.key} is off limits; pick another.")

    async def execute(self, params: PickParams, ctx: ToolContext) -> str:
        if self.late:
            await self.rejected.wait()
        return f"value of {params.key}"

    def spec(self) -> ToolSpec[PickParams]:
        return ToolSpec(
            name="pick",
            description="Pick a key.",
            params=PickParams,
            execute=self.execute,
            validate=self.validate,
        )


async def test_call_rows_of_a_replayed_durable_run_are_counted_once(
    openai_env: FakeOpenAIServer, store_target: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kernos.store")
    store = Store(store_target)
    pick = Pick()

    async def run(session_id: str, run_key: str | None) -> list[str]:
        finished: list[str] = []

        def heard(event: SessionEvent) -> None:
            if event.kind == "tool_result":
                finished.append(event.data["result"].text)

        session = Session(resolve_model("openai-chat:test", Config()), "", [pick.spec()],
                          session_id=session_id, agent="explore", usage_store=store,
                          on_event=heard)  # fmt: skip
        session.key_turns(run_key)
        pick.rejected.clear()
        openai_env.script(
            tool_call("pick", {"key": "forbidden"}),
            tool_calls(("pick", {"key": "alpha"}), ("pick", {"key": "banned"})),
            text("ok"),
        )
        assert await session.prompt("go") == "ok"
        return finished

    first = await run("s_child", "7")
    # the replay after a crash: the same calls, under the same run key; the parallel batch's
    # calls finish in another order, and the row counted is still the one already stored
    pick.late = True
    replayed = await run("s_child", "7")
    assert first[1:] == ["value of alpha", "banned is off limits; pick another."]
    assert replayed[1:] == list(reversed(first[1:]))
    # outside a durable run every call is counted, however often the session runs
    pick.late = False
    await run("s_main", None)
    await run("s_main", None)
    store.flush()
    rows = call_rows(store, None)
    assert [(r["session_id"], r["tool"], r["rejected"], r["run_key"]) for r in rows] == [
        ("s_child", "pick", 1, "7:1"),
        ("s_child", "pick", 1, "7:2"),
        *[("s_main", "pick", 1, None)] * 4,
    ]
    store.close()
    # a replayed row is skipped (ON CONFLICT), not a write the store drops with an error
    assert [r.getMessage() for r in caplog.records] == []


def test_the_call_key_migration_keeps_the_rows_of_an_existing_store(tmp_path: Path) -> None:
    """A store file of the previous version (usage 1-3) with a call row in it: opening it adds
    the key, keeps the row, and a keyed call is kept once."""
    path = tmp_path / "kernos.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE schema_migrations (namespace TEXT NOT NULL, version INTEGER NOT NULL,"
            " name TEXT NOT NULL, applied_at REAL NOT NULL, PRIMARY KEY (namespace, version))"
        )
        for version, name, sql in USAGE_MIGRATIONS[:3]:
            db.executescript(sql)
            db.execute("INSERT INTO schema_migrations VALUES ('usage', ?, ?, 0)", (version, name))
        db.execute("INSERT INTO usage_calls (session_id, agent, model, tool, rejected, created_at)"
                   " VALUES ('s_1', 'explore', 'gpt-4o', 'pick', 1, 1)")  # fmt: skip
    store = Store(path)
    rejected = ToolResult("no", {"code": "forbidden_key", "stage": "semantic"}, is_error=True)
    try:
        assert store.versions("usage") == [1, 2, 3, 4]
        for _ in range(2):
            record_call(store, "s_1", "explore", "gpt-4o", "pick", rejected, lambda: "1:1")
        rows = call_rows(store, None)
        assert [(r["tool"], r["rejected"], r["run_key"]) for r in rows] == [
            ("pick", 1, None),
            ("pick", 1, "1:1"),
        ]
    finally:
        store.close()
