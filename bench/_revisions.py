"""Interleave a benchmark between this checkout and another revision's ``src`` (``--against``).

Each round runs the benchmark once per revision in a fresh interpreter (``BENCH_ONE=1``), which
prints its figures as one JSON object; the medians are reported side by side, with the ratio.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def against(script: str, other_src: str, rounds: int) -> None:
    here = str(Path(script).resolve().parents[1] / "src")
    runs: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
    for _ in range(rounds):
        for label, src in (("other", other_src), ("this", here)):
            env = {**os.environ, "PYTHONPATH": src, "BENCH_ONE": "1"}
            out = subprocess.run(
                [sys.executable, script], env=env, capture_output=True, text=True, check=True
            )
            runs[label].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{rounds} interleaved rounds; this = {here}, other = {other_src}")
    for key in runs["this"][0]:
        mine = statistics.median(r[key] for r in runs["this"])
        theirs = statistics.median(r[key] for r in runs["other"])
        print(f"  {key:<34} other {theirs:10.3f}   this {mine:10.3f}   ratio {mine / theirs:6.2f}")


def one_run() -> bool:
    return os.environ.get("BENCH_ONE") == "1"
