"""Turns/s with turn recording on and off: ``.venv/bin/python bench/store.py``.

``SESSIONS`` concurrent sessions of an instant in-process model (pydantic-ai ``TestModel``) each
prompt ``TURNS`` times; recording on writes every turn to a real SQLite file. On and off are
interleaved, each figure the median of ``ROUNDS``. Run it with ``PYTHONPATH`` pointing at another
checkout's ``src`` to compare revisions, or interleave both:
``bench/store.py --against /path/to/other/src``. The store lives in the temporary directory: check
that it is a real disk (here /tmp is ext4), not a tmpfs, or commits cost nothing.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _revisions import against, one_run
from pydantic_ai.models.test import TestModel

import kernos
from kernos.runtime import Session, Store

SESSIONS = 200
TURNS = 3
ROUNDS = 3


async def turns_per_second(store: Store | None) -> float:
    model = TestModel(custom_output_text="ok")
    sessions = [Session(model, store=store) for _ in range(SESSIONS)]

    async def talk(session: Session) -> None:
        for n in range(TURNS):
            await session.prompt(f"turn {n}")

    start = time.perf_counter()
    await asyncio.gather(*(talk(s) for s in sessions))
    return SESSIONS * TURNS / (time.perf_counter() - start)


def main() -> None:
    on: list[float] = []
    off: list[float] = []
    with tempfile.TemporaryDirectory() as home:
        store = Store(Path(home) / "kernos.db")
        for _ in range(ROUNDS):
            off.append(asyncio.run(turns_per_second(None)))
            on.append(asyncio.run(turns_per_second(store)))
        store.close()
    if one_run():
        figures = {"turns/s recording off": statistics.median(off)}
        figures["turns/s recording on"] = statistics.median(on)
        figures["on/off"] = figures["turns/s recording on"] / figures["turns/s recording off"]
        print(json.dumps(figures))
        return
    print(f"kernos from {kernos.__file__}")
    print(f"{SESSIONS} sessions x {TURNS} turns, instant in-process model:")
    print(f"  recording off: {statistics.median(off):8.0f} turns/s")
    print(f"  recording on:  {statistics.median(on):8.0f} turns/s")
    print(f"  on / off:      {statistics.median(on) / statistics.median(off):8.2f}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--against":
        against(__file__, sys.argv[2], rounds=3)
    else:
        main()
