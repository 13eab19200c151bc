"""The store off the hot path. Writes of one loop turn are one transaction committed
on the store's writer thread, or where a prompt waits for them when the lock is free at once; a
prompt returns only once its turns are committed (acknowledged), so another connection sees them
and a SIGKILL right after loses none of them."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pydantic_ai.models.test import TestModel

from kernos.runtime import Session, Store
from tests import _wait as wait
from tests._stores import LOCKED, LOCKED_MATCH, count_turns, traced, writer_lock_held


def test_a_sqlite_store_syncs_normal(tmp_path: Path) -> None:
    store = Store(tmp_path / "kernos.db")
    assert store.query("PRAGMA synchronous")[0][0] == 1  # NORMAL
    store.close()


async def test_turns_are_committed_in_batches_before_each_prompt_returns(
    store_target: str,
) -> None:
    path = store_target
    store = Store(path)
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
    commits = [thread for sql, thread in seen if sql == "COMMIT"]
    # at most one transaction per prompt: each commits what its loop turn buffered, with
    # whatever other sessions buffered meanwhile
    assert commits and len(commits) <= 20 * 3
    store.close()


async def test_a_prompt_s_commit_waits_on_the_writer_thread_never_on_the_loop(
    store_target: str,
) -> None:
    # free at once: committed where the prompt waits (the loop's thread, SQLite); held by
    # another process: the loop never waits for it, the writer thread does
    store = Store(store_target, timeout=5.0)
    seen = traced(store)
    loop_thread = threading.get_ident()
    store.record_turn("s_3", "main", "user", "free")
    await store.flushed()
    in_place = [thread for sql, thread in seen if sql == "COMMIT"]
    assert in_place == ([loop_thread] if store.dialect == "sqlite" else in_place)
    seen.clear()
    held = threading.Event()

    def hold() -> None:  # another connection holds the lock until the writer thread waits for it
        with writer_lock_held(store_target):
            held.set()
            wait.wait_for(
                lambda: [sql for sql, thread in seen if thread != loop_thread and "BEGIN" in sql],
                "the writer thread waiting for the lock",
            )

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(30)
    store.record_turn("s_3", "main", "assistant", "held")
    await store.flushed()  # the loop tries once without waiting, then the writer thread waits
    holder.join(30)
    on_loop = [sql for sql, thread in seen if thread == loop_thread]
    assert "COMMIT" not in on_loop
    if store.dialect == "sqlite":
        assert on_loop[:2] == ["PRAGMA busy_timeout=0", "BEGIN IMMEDIATE"]
    assert [thread for sql, thread in seen if sql == "COMMIT"]
    assert [t["text"] for t in store.turns("s_3")] == ["free", "held"]
    store.close()


async def test_one_loop_turn_of_writes_is_one_transaction(store_target: str) -> None:
    store = Store(store_target)
    seen = traced(store)
    for n in range(200):
        store.record_turn("s_1", "main", "user", f"hello {n}")
    await store.flushed()
    assert [sql.split()[0] for sql, _ in seen].count("BEGIN") == 1
    assert [t["text"] for t in store.turns("s_1")] == [f"hello {n}" for n in range(200)]
    store.close()


async def test_a_locked_store_keeps_the_turns_in_order_for_the_next_flush(
    store_target: str,
) -> None:
    store = Store(store_target, timeout=0.05)
    with writer_lock_held(store_target):  # another process holds the write lock
        store.record_turn("s_2", "main", "user", "first")
        with pytest.raises(LOCKED, match=LOCKED_MATCH):
            await store.flushed()
        store.record_turn("s_2", "main", "assistant", "second")
    await store.flushed()
    assert [t["text"] for t in store.turns("s_2")] == ["first", "second"]
    store.close()


def test_a_write_left_by_a_finished_loop_does_not_stall_the_next_loop(store_target: str) -> None:
    path = store_target
    store = Store(path)

    async def buffered(text: str) -> None:
        store.record_turn("s_5", "main", "user", text)

    async def next_loop() -> None:
        await buffered("second")  # its commit is scheduled on this loop, and the first's too
        await wait.until(lambda: count_turns(path, "s_5") == 2, "both turns committed", 10)

    first = asyncio.new_event_loop()  # a loop that stops before the commit's turn comes
    first.call_soon(store.record_turn, "s_5", "main", "user", "first")
    first.call_soon(first.stop)
    first.run_forever()
    first.close()
    asyncio.run(next_loop())
    assert count_turns(path, "s_5") == 2
    store.close()


def test_close_commits_what_is_still_buffered(store_target: str) -> None:
    store = Store(store_target)

    async def buffered() -> None:
        store.record_turn("s_3", "main", "user", "late")  # the loop ends before its turn does

    asyncio.run(buffered())
    store.close()
    assert count_turns(store_target, "s_3") == 1


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


def test_a_sigkill_after_a_prompt_returned_loses_no_acknowledged_turn(store_target: str) -> None:
    path = store_target
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


def test_reads_see_every_earlier_write(store_target: str) -> None:
    store = Store(store_target)

    async def write_then_read() -> list[str]:
        store.record_turn("s_4", "main", "user", "a")
        store.record_turn("s_4", "main", "assistant", "b")
        return [t["text"] for t in store.turns("s_4")]  # same loop turn: the read flushes

    assert asyncio.run(write_then_read()) == ["a", "b"]
    store.close()
