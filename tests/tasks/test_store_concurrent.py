"""Two processes writing to one store at the same time lose nothing: every turn, task row and
event of both is there, and the events both append to one task are numbered 1..N without a gap
or a collision (the number is allocated inside the INSERT, under the writer's lock)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests._stores import count_turns
from tests._wait import wait_for

from kernos.runtime import Store
from kernos.tasks import TaskStore

ROUNDS = 150

#: says it is ready (the file ``GO.NAME``), waits for the go file, then writes ROUNDS loop turns
#: of a turn, a task row and two events
WRITER = """
import asyncio, os, sys, time
from kernos.runtime import Store
from kernos.tasks import TaskStore

target, name, go, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

async def main() -> None:
    tasks = TaskStore(Store(target))
    open(f"{go}.{name}", "w").close()
    # the start line every writer waits at (a barrier in the writer, not a wait of the test's:
    # the test waits until each writer is ready, then writes the go file)
    while not os.path.exists(go):
        await asyncio.sleep(0.005)
    for n in range(rounds):
        tasks.store.record_turn(f"s_{name}", "main", "user", f"{name} {n}")
        tasks.insert({"id": f"t_{name}_{n}", "parent_session": f"s_{name}", "target_kind": "agent",
                      "target": "explore", "model": "m", "status": "pending",
                      "residency": "resident", "created_at": time.time()})
        tasks.event(f"t_{name}_{n}", "status", {"from": None, "to": "pending"})
        tasks.event("t_shared", "note", {"by": name, "n": n})
        if n % 3 == 0:
            await tasks.store.flushed()
        else:
            await asyncio.sleep(0)  # a turn of the loop: the buffered writes interleave
    tasks.store.close()

asyncio.run(main())
"""


def test_two_processes_writing_at_once_lose_nothing(store_target: str, tmp_path: Path) -> None:
    setup = TaskStore(Store(store_target))  # migrated once, before the writers race
    setup.insert({"id": "t_shared", "parent_session": "s_0", "target_kind": "agent",
                  "target": "explore", "model": "m", "status": "running",
                  "residency": "resident", "created_at": time.time()})  # fmt: skip
    setup.flush()
    go = tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, store_target, name, str(go), str(ROUNDS)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    ready = [tmp_path / f"go.{name}" for name in ("a", "b")]
    wait_for(lambda: all(p.exists() for p in ready), "both writers ready", alive=writers)
    go.write_text("go", encoding="utf-8")  # both start at once
    for writer in writers:
        _, stderr = writer.communicate(timeout=120)
        assert writer.returncode == 0, stderr
        assert "dropped a write" not in stderr

    assert count_turns(store_target, "s_a") == ROUNDS
    assert count_turns(store_target, "s_b") == ROUNDS
    rows = setup.recent(limit=3 * ROUNDS)
    assert len(rows) == 2 * ROUNDS + 1
    shared = setup.events("t_shared")
    assert [e["seq"] for e in shared] == list(range(1, 2 * ROUNDS + 1))
    for name in ("a", "b"):
        mine = [e["payload"]["n"] for e in shared if e["payload"]["by"] == name]
        assert mine == list(range(ROUNDS))  # each writer's own order is kept
        assert [e["seq"] for e in setup.events(f"t_{name}_7")] == [1]
    setup.store.close()
