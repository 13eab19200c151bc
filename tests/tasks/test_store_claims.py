"""Claims without the writer's lock: a task is taken by exactly one executor and a run's completion
notice is claimed exactly once, however many processes ask at the same time, on SQLite and on
PostgreSQL. A batch of buffered writes on PostgreSQL is three statements (``BEGIN``; the writer's
lock and every write; ``COMMIT``), and text a model wrote comes back from it as it was written."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from tests._stores import is_postgres, traced

from kernos.runtime import Store
from kernos.tasks import TaskStore

TASKS = 60
RACERS = 4


def row(task_id: str, status: str = "pending") -> dict[str, Any]:
    return {"id": task_id, "parent_session": "s_parent", "target_kind": "agent",
            "target": "explore", "model": "openai-chat:test", "status": status,
            "residency": "resident", "created_at": time.time()}  # fmt: skip


def race(stores: list[TaskStore], work: Callable[[int, TaskStore], Any]) -> list[Any]:
    """``work(n, store)`` on one thread per store, released at once; their results in order."""
    results: list[Any] = [None] * len(stores)
    go = threading.Barrier(len(stores))

    def run(n: int) -> None:
        go.wait()
        results[n] = work(n, stores[n])

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_each_task_is_taken_by_exactly_one_of_several_executors(store_target: str) -> None:
    setup = TaskStore(Store(store_target))
    ids = [f"t_{n:08x}" for n in range(TASKS)]
    for task_id in ids:
        setup.insert(row(task_id))
    setup.insert(row("t_cancel00", status="cancelled"))  # not there to take
    setup.flush()
    stores = [TaskStore(Store(store_target)) for _ in range(RACERS)]

    def take(n: int, store: TaskStore) -> set[str]:
        order = [*ids, "t_cancel00"]
        random.Random(n).shuffle(order)
        taken: set[str] = set()
        for start in range(0, len(order), 7):  # several overlapping batches per executor
            taken |= set(store.take(f"host:{n}", order[start : start + 7]))
        return taken

    results = race(stores, take)
    assert sorted(i for taken in results for i in taken) == ids  # each once, none twice
    for n, taken in enumerate(results):
        rows = setup.rows(sorted(taken))
        assert {r["executor"] for r in rows.values()} <= {f"host:{n}"}
    # an executor takes again what it holds already (the reaper gave it back), nobody else does
    a = max(range(RACERS), key=lambda n: len(results[n]))
    b = (a + 1) % RACERS
    held = sorted(results[a])[:3]
    assert set(stores[a].take(f"host:{a}", held)) == set(held)
    assert stores[b].take(f"host:{b}", held) == {}
    assert stores[b].claim(held[0], f"host:{b}") is False
    assert stores[a].claim(held[0], f"host:{a}") is True
    for store in [setup, *stores]:
        store.store.close()


def test_a_notice_is_claimed_exactly_once_per_run_epoch(store_target: str) -> None:
    setup = TaskStore(Store(store_target))
    ids = [f"t_{n:08x}" for n in range(TASKS)]
    for task_id in ids:
        setup.insert(row(task_id, status="completed"))
    setup.flush()
    stores = [TaskStore(Store(store_target)) for _ in range(RACERS)]

    def claim(n: int, store: TaskStore) -> set[str]:
        order = list(ids)
        random.Random(n).shuffle(order)
        claimed: set[str] = set()
        for start in range(0, len(order), 9):
            claimed |= store.claim_notices([(i, 1) for i in order[start : start + 9]])
        return claimed

    results = race(stores, claim)
    assert sorted(i for claimed in results for i in claimed) == ids
    assert stores[0].claim_notices([(ids[0], 1)]) == set()  # that run's notice went already
    assert stores[1].claim_notice(ids[0], 2) is True  # a revived run's notice is a new one
    assert stores[0].claim_notice(ids[0], 2) is False
    assert setup.claim_notices([(ids[1], 2), (ids[2], 3)]) == {ids[1], ids[2]}
    for store in [setup, *stores]:
        store.store.close()


MODEL_TEXT = [
    'it\'s "quoted"; DROP TABLE tasks; --',
    "back\\slash \\' and $$dollar$$ and $1 placeholders",
    "percent % and %s and %(name)s and %%",
    "unicode: 日本語 ✓ \U0001f600, a lone surrogate \ud800 and a NUL \x00 byte",
    "lines\nand\ttabs\r\n;",
]


def test_text_a_model_wrote_comes_back_from_a_batch_as_it_was_written(
    store_target: str,
) -> None:
    tasks = TaskStore(Store(store_target))

    async def one_loop_turn() -> None:
        for n, text in enumerate(MODEL_TEXT):
            tasks.insert(row(f"t_text{n:04x}"))
            tasks.update(f"t_text{n:04x}", final_text=text, error=text)
            tasks.event(f"t_text{n:04x}", "message", {"role": "assistant", "text": text})
        await tasks.store.flushed()

    asyncio.run(one_loop_turn())
    nul = "\ufffd" if is_postgres(store_target) else "\x00"  # PostgreSQL text cannot hold one
    for n, text in enumerate(MODEL_TEXT):
        stored = text.replace("\ud800", "\ufffd").replace("\x00", nul)
        found = tasks.get(f"t_text{n:04x}")
        assert found is not None and found["final_text"] == stored
        (event,) = tasks.events(f"t_text{n:04x}")  # JSON: its NUL travels as an escape
        assert event["payload"]["text"] == text.replace("\ud800", "\ufffd")
    tasks.store.close()


@pytest.mark.postgres
def test_a_batch_on_postgres_is_three_statements(fresh_postgres_url: str) -> None:
    """``BEGIN``; the writer's lock and every write; ``COMMIT``: the lock is held across one
    round trip to this process, not one per statement."""
    tasks = TaskStore(Store(fresh_postgres_url))
    seen = traced(tasks.store)

    async def one_loop_turn() -> None:
        for n in range(50):
            tasks.insert(row(f"t_many{n:04x}"))
            tasks.event(f"t_many{n:04x}", "status", {"from": None, "to": "pending"})
        await tasks.store.flushed()

    asyncio.run(one_loop_turn())
    assert len(seen) == 3
    begin, script, commit = (sql for sql, _ in seen)
    assert (begin, commit) == ("BEGIN", "COMMIT")
    assert script.startswith("SELECT pg_advisory_xact_lock(") and script.count("INSERT") == 100
    assert [e["seq"] for e in tasks.events("t_many0000")] == [1]
    tasks.store.close()
