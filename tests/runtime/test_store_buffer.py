"""Issue 13 §3: the store off the hot path. Writes of one loop turn are one transaction committed
on the store's writer thread; a prompt returns only once its turns are committed (acknowledged),
so another connection sees them and a SIGKILL right after loses none of them."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pydantic_ai.models.test import TestModel

from kernos.runtime import Session, Store


def count_turns(path: Path, session_id: str) -> int:
    """Read through a connection of its own, as another process would."""
    with contextlib.closing(sqlite3.connect(path)) as other:
        sql = "SELECT COUNT(*) FROM turns WHERE session_id = ?"
        (n,) = other.execute(sql, (session_id,)).fetchone()
    return int(n)


def traced(store: Store) -> list[tuple[str, int]]:
    """Every statement the store's connection runs, with the thread that ran it."""
    seen: list[tuple[str, int]] = []
    store._conn.set_trace_callback(lambda sql: seen.append((sql, threading.get_ident())))
    return seen


async def test_turns_are_committed_off_the_loop_before_each_prompt_returns(tmp_path: Path) -> None:
    path = tmp_path / "kernos.db"
    store = Store(path)
    assert store.query("PRAGMA synchronous")[0][0] == 1  # NORMAL
    seen = traced(store)
    sessions = [Session(TestModel(custom_output_text="ok"), store=store) for _ in range(20)]

    async def talk(session: Session) -> list[int]:
        counts = []
        for n in range(3):
            await session.prompt(f"turn {n}")
            counts.append(count_turns(path, session.session_id))  # no loop turn in between
        return counts

    results = await asyncio.gather(*(talk(s) for s in sessions))
    assert results == [[2, 4, 6]] * 20  # a user and an assistant turn per prompt, all visible
    loop_thread = threading.get_ident()
    commits = [thread for sql, thread in seen if sql == "COMMIT"]
    assert commits and loop_thread not in commits
    assert len(commits) < 20 * 3  # batched: fewer transactions than prompts
    store.close()


async def test_one_loop_turn_of_writes_is_one_transaction(tmp_path: Path) -> None:
    store = Store(tmp_path / "kernos.db")
    seen = traced(store)
    for n in range(200):
        store.record_turn("s_1", "main", "user", f"hello {n}")
    await store.flushed()
    assert [sql for sql, _ in seen].count("BEGIN IMMEDIATE") == 1
    assert [t["text"] for t in store.turns("s_1")] == [f"hello {n}" for n in range(200)]
    store.close()


async def test_a_locked_store_keeps_the_turns_in_order_for_the_next_flush(tmp_path: Path) -> None:
    path = tmp_path / "kernos.db"
    store = Store(path, timeout=0.05)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    store.record_turn("s_2", "main", "user", "first")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        await store.flushed()
    store.record_turn("s_2", "main", "assistant", "second")
    other.execute("ROLLBACK")
    other.close()
    await store.flushed()
    assert [t["text"] for t in store.turns("s_2")] == ["first", "second"]
    store.close()


def test_a_write_left_by_a_finished_loop_does_not_stall_the_next_loop(tmp_path: Path) -> None:
    path = tmp_path / "kernos.db"
    store = Store(path)

    async def buffered(text: str) -> None:
        store.record_turn("s_5", "main", "user", text)

    async def next_loop() -> None:
        await buffered("second")
        await asyncio.sleep(0.05)  # a few loop turns: the commit is scheduled on this loop
        for _ in range(200):
            if count_turns(path, "s_5") == 2:
                return
            await asyncio.sleep(0.05)

    first = asyncio.new_event_loop()  # a loop that stops before the commit's turn comes
    first.call_soon(store.record_turn, "s_5", "main", "user", "first")
    first.call_soon(first.stop)
    first.run_forever()
    first.close()
    asyncio.run(next_loop())
    assert count_turns(path, "s_5") == 2
    store.close()


def test_close_commits_what_is_still_buffered(tmp_path: Path) -> None:
    store = Store(tmp_path / "kernos.db")

    async def buffered() -> None:
        store.record_turn("s_3", "main", "user", "late")  # the loop ends before its turn does

    asyncio.run(buffered())
    store.close()
    assert count_turns(tmp_path / "kernos.db", "s_3") == 1


#: prompts N times, printing after each return, then SIGKILLs itself before another loop turn
KILLED = """
import asyncio, os, signal, sys
from pydantic_ai.models.test import TestModel
from kernos.runtime import Session, Store

async def main() -> None:
    store = Store(sys.argv[1])
    session = Session(TestModel(custom_output_text="ok"), store=store, session_id="s_killed")
    for n in range(int(sys.argv[2])):
        await session.prompt(f"turn {n}")
        print(n, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


def test_a_sigkill_after_a_prompt_returned_loses_no_acknowledged_turn(tmp_path: Path) -> None:
    path = tmp_path / "kernos.db"
    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(path), "5"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    acknowledged = len(done.stdout.split())
    assert acknowledged == 5
    assert count_turns(path, "s_killed") == 2 * acknowledged


def test_reads_see_every_earlier_write(tmp_path: Path) -> None:
    store = Store(tmp_path / "kernos.db")

    async def write_then_read() -> list[str]:
        store.record_turn("s_4", "main", "user", "a")
        store.record_turn("s_4", "main", "assistant", "b")
        return [t["text"] for t in store.turns("s_4")]  # same loop turn: the read flushes

    assert asyncio.run(write_then_read()) == ["a", "b"]
    store.close()
