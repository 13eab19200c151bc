"""The built-in workspace tools through the boundary: ``.venv/bin/python bench/workspace.py``

Per call, in ms of wall time (best of several rounds), over a synthetic workspace of 300 files ×
200 lines: ``search_files`` with a pattern every line matches, one that matches one line per file,
and one that matches nothing (every file read each time), ``read_file`` of one 2,000-line file,
``list_files`` of the whole tree. What it shows: the cost of running the model's pattern on the
``regex`` package with a time budget, of opening each file ``O_NOFOLLOW`` and checking the open
file, and of the bounded walk.

``bench/workspace.py --against /path/to/other/src`` runs both revisions interleaved, each in a
fresh interpreter, and prints the medians side by side with the ratio (this / other).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _revisions import against, one_run

from kernos.boundary import call_tool
from kernos.tools import LocalWorkspace, builtin_tools

FILES = 300
LINES = 200
ROUNDS = 5
CALLS = 5

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "search, a match per line (ms)": ("search_files", {"pattern": "needle"}),
    "search, a match per file (ms)": ("search_files", {"pattern": r"ne+dle\s+17$"}),
    "search, no match (ms)": ("search_files", {"pattern": r"haystack\s+\d+"}),
    "read_file 2000 lines (ms)": ("read_file", {"path": "big.txt"}),
    "list_files tree (ms)": ("list_files", {}),
}


def _tree(root: Path) -> None:
    for number in range(FILES):
        folder = root / f"pkg{number % 10}" / f"mod{number % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        body = "".join(
            f"line {line} of file {number}: some ordinary text, needle {line}\n"
            for line in range(LINES)
        )
        (folder / f"file{number}.txt").write_text(body)
    (root / "big.txt").write_text("".join(f"row {n}: text text text\n" for n in range(2000)))


async def _measure(root: Path) -> dict[str, float]:
    tools = {spec.name: spec for spec in builtin_tools(LocalWorkspace([root]))}
    figures: dict[str, float] = {}
    for label, (name, args) in CASES.items():
        best = float("inf")
        for _ in range(ROUNDS):
            start = time.perf_counter()
            for _ in range(CALLS):
                result = await call_tool(tools[name], dict(args))
                assert not result.is_error, result.text
            best = min(best, (time.perf_counter() - start) / CALLS * 1000)
        figures[label] = best
    return figures


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder).resolve()
        _tree(root)
        figures = asyncio.run(_measure(root))
    if one_run():
        print(json.dumps(figures))
        return
    print(f"{FILES} files x {LINES} lines; best of {ROUNDS} rounds of {CALLS} calls")
    for label, value in figures.items():
        print(f"  {label:<32} {value:8.2f}")
    print(f"  median {statistics.median(figures.values()):.2f} ms")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--against":
        against(__file__, sys.argv[2], rounds=3)
    else:
        main()
