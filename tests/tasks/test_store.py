"""The task store's write buffer: a flush that fails keeps or isolates what it could not commit,
and event numbers are allocated by the database, so two processes never collide."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from tests._stores import LOCKED, LOCKED_MATCH, writer_lock_held

from kernos.runtime import Store
from kernos.tasks import ACTIVE, TaskStatus, TaskStore


def row(task_id: str) -> dict[str, Any]:
    return {"id": task_id, "parent_session": "s_parent", "target_kind": "agent",
            "target": "explore", "model": "openai-chat:test", "status": "pending",
            "residency": "resident", "created_at": time.time()}  # fmt: skip


def test_a_write_that_breaks_a_constraint_does_not_drop_the_others(store_target: str) -> None:
    tasks = TaskStore(Store(store_target))
    tasks.insert(row("t_00000001"))

    async def one_loop_turn() -> None:  # buffered together, committed by one flush
        tasks.update("t_00000001", status="running")
        tasks.insert(row("t_00000001"))  # a duplicate id: this write alone cannot be stored
        tasks.insert(row("t_00000002"))
        tasks.event("t_00000002", "status", {"from": None, "to": "pending"})
        tasks.update("t_00000002", final_text="done \ud800 ok")  # a lone surrogate from a model
        tasks.update("t_00000002", error="a NUL \x00 byte")  # PostgreSQL text cannot hold it
        tasks.event("t_00000002", "status", {"from": "pending", "to": "running"})
        tasks.flush()

    asyncio.run(one_loop_turn())
    assert tasks.get("t_00000001")["status"] == "running"  # type: ignore[index]
    assert tasks.get("t_00000002")["final_text"] == "done \ufffd ok"  # type: ignore[index]
    assert tasks.get("t_00000002")["error"] in ("a NUL \x00 byte", "a NUL \ufffd byte")  # type: ignore[index]
    assert [(e["seq"], e["type"]) for e in tasks.events("t_00000002")] == [
        (1, "status"),
        (2, "status"),
    ]
    tasks.store.close()


def test_a_locked_store_keeps_the_writes_for_the_next_flush(store_target: str) -> None:
    tasks = TaskStore(Store(store_target, timeout=0.05))

    async def writes() -> None:
        tasks.insert(row("t_00000003"))
        tasks.event("t_00000003", "status", {"from": None, "to": "pending"})
        with pytest.raises(LOCKED, match=LOCKED_MATCH):
            tasks.flush()

    with writer_lock_held(store_target):  # another process holds the write lock
        asyncio.run(writes())
    tasks.flush()
    assert tasks.get("t_00000003") is not None
    assert [e["seq"] for e in tasks.events("t_00000003")] == [1]
    tasks.store.close()


def test_two_stores_on_one_database_number_events_without_colliding(store_target: str) -> None:
    owner = TaskStore(Store(store_target))
    canceller = TaskStore(Store(store_target))
    owner.insert(row("t_00000004"))
    owner.event("t_00000004", "status", {"from": None, "to": "pending"})
    canceller.request_cancel("t_00000004")
    owner.event("t_00000004", "status", {"from": "pending", "to": "cancelled"})
    assert [(e["seq"], e["type"]) for e in owner.events("t_00000004")] == [
        (1, "status"),
        (2, "cancel_requested"),
        (3, "status"),
    ]
    owner.store.close()
    canceller.store.close()


def test_only_an_active_task_is_ended_or_claimed(store_target: str) -> None:
    """``update(if_active=True)`` and ``claim`` act on a task exactly when its status is ACTIVE."""
    store = Store(store_target)
    try:
        _end_and_claim_each_status(TaskStore(store))
    finally:
        store.close()


def _end_and_claim_each_status(tasks: TaskStore) -> None:
    for status in TaskStatus:
        tasks.insert({**row(f"t_{status}"), "status": str(status)})
    tasks.flush()
    for status in TaskStatus:
        tasks.update(f"t_{status}", if_active=True, final_text="ended")
    tasks.flush()
    for status in TaskStatus:
        got = tasks.get(f"t_{status}")
        assert got is not None
        assert (got["final_text"] == "ended") is (status in ACTIVE), status
    claimed = {s for s in TaskStatus if tasks.claim(f"t_{s}", "executor-1")}
    assert claimed == set(ACTIVE)


def test_a_task_ends_lost_once_and_only_from_an_active_run(store_target: str) -> None:
    """``lose`` is the one way to end a task ``lost`` (reconcile, the reaper, the orphan guard):
    an active task only, its ``status`` event with it, and with ``epoch`` only that run."""
    store = Store(store_target)
    try:
        tasks = TaskStore(store)
        for status in TaskStatus:
            tasks.insert({**row(f"t_{status}"), "status": str(status)})
        tasks.flush()
        ended = {s for s in TaskStatus if tasks.lose(f"t_{s}", str(s), "its process ended")}
        assert ended == set(ACTIVE)
        assert not tasks.lose("t_running", "running", "again")  # the first end stands
        for status in TaskStatus:
            lines = [line for line in tasks.transcript(f"t_{status}") if "→ lost" in line]
            assert lines == (
                [f"[status] {status} → lost — its process ended"] if status in ACTIVE else []
            )
        tasks.insert({**row("t_run"), "status": "running"})
        tasks.flush()
        assert not tasks.lose("t_run", "running", "a later run", epoch=2)
        assert tasks.lose("t_run", "running", "its executor went silent", epoch=1)
        assert tasks.transcript("t_run")[-1] == (
            "[status] running → lost (run epoch 1) — its executor went silent"
        )
    finally:
        store.close()


def test_ids_are_read_and_taken_in_chunks_one_query_can_hold(tmp_path: Any) -> None:
    from kernos.tasks._store_schema import id_chunks

    assert list(id_chunks([])) == []
    chunks = list(id_chunks([f"t_{n}" for n in range(1001)]))
    assert [(len(ids), marks.count("?")) for ids, marks in chunks] == [
        (500, 500),
        (500, 500),
        (1, 1),
    ]
    assert chunks[2] == (["t_1000"], "?")
    tasks = TaskStore(Store(tmp_path / "kernos.db"))
    ids = [f"t_{n:08d}" for n in range(1001)]
    for task_id in ids:
        tasks.insert(row(task_id))
    tasks.flush()
    assert sorted(tasks.rows([*ids, "t_absent", ids[0]])) == ids
    assert sorted(tasks.take("w1", ids)) == ids  # a conditional update per chunk
    assert tasks.take("w2", ids) == {}
    tasks.store.close()
