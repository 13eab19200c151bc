"""Benchmark start-up: the light commands against ``python -c "import typer, rich"``.

Runs ``kernos --help``, ``kernos --version``, ``kernos tasks list [--json]`` (an empty store),
``kernos channels`` (a ``kernos.toml`` with one file channel) and ``kernos --show-completion bash``,
each in a fresh process, interleaved
with the reference, for ``--rounds`` rounds; prints the median wall time and CPU time (user + system
of the child) of each and its ratio to the reference's median. Target: every ratio ≤ 3.
A bare typer app running one command with two options is shown as the floor: typer (0.29) itself
imports pydantic to coerce a command's parameters, which ``import typer, rich`` does not include.

    .venv/bin/python bench/startup.py                                   # this checkout
    .venv/bin/python bench/startup.py --kernos /other/.venv/bin/kernos  # another install

The reference runs on the Python next to the ``kernos`` script, so both sides share one install.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REFERENCE = "import typer, rich"
COMMANDS = [
    ["--help"],
    ["--version"],
    ["tasks", "list"],
    ["tasks", "list", "--json"],
    ["channels"],
    ["--show-completion", "bash"],
]
#: the least a typer command with options costs: what ``kernos tasks list`` cannot go below
FLOOR = """\
import sys
from pathlib import Path
from typing import Annotated
import typer
app, group = typer.Typer(), typer.Typer()
@group.command("list")
def list_(
    config: Annotated[Path | None, typer.Option("--config")] = None,
    limit: Annotated[int, typer.Option("--limit")] = 50,
) -> None:
    print("(no tasks)")
@group.command("show")
def show(task_id: str) -> None: ...
app.add_typer(group, name="tasks")
sys.argv = ["floor", "tasks", "list"]
app()
"""
CONFIG = """\
[channels.log]
kind = "file"
path = "out/log.jsonl"
description = "Where the agent writes its log."
"""


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run; a failing command stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved runs of each (≥ 5)")
    parser.add_argument(
        "--kernos",
        type=Path,
        default=Path(sys.executable).with_name("kernos"),
        help="the kernos script to measure (default: the one next to this Python)",
    )
    args = parser.parse_args()
    if args.rounds < 5:
        parser.error("--rounds must be at least 5: a median of fewer runs is noise here")
    python = str(args.kernos.with_name("python"))
    cases = {f'python -c "{REFERENCE}"': [python, "-c", REFERENCE]}
    cases["bare typer app: tasks list (floor)"] = [python, "-c", FLOOR]
    cases.update({f"kernos {' '.join(c)}": [str(args.kernos), *c] for c in COMMANDS})

    with tempfile.TemporaryDirectory(prefix="kernos-startup-") as temp:
        cwd = Path(temp)
        (cwd / "kernos.toml").write_text(CONFIG, encoding="utf-8")
        env = {**os.environ, "KERNOS_HOME": str(cwd / "home")}
        # the warm-up writes kernos's .pyc files, as a first run does for a user: with
        # PYTHONDONTWRITEBYTECODE set (as on some CI machines) every run would compile kernos's
        # source again while the reference reads the .pyc files its install wrote
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for argv in cases.values():  # warm the file cache and .pyc files, outside the timings
            timed(argv, cwd, env)
        walls: dict[str, list[float]] = {name: [] for name in cases}
        cpus: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, argv in cases.items():
                wall, cpu = timed(argv, cwd, env)
                walls[name].append(wall)
                cpus[name].append(cpu)

    print(f"start-up of {args.kernos}: median of {args.rounds} interleaved runs")
    print(f"{'command':<36}{'wall ms':>9}{'ratio':>7}{'cpu ms':>9}{'ratio':>7}")
    ref_wall = statistics.median(next(iter(walls.values())))
    ref_cpu = statistics.median(next(iter(cpus.values())))
    for name in cases:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        print(
            f"{name:<36}{wall * 1000:>9.0f}{wall / ref_wall:>7.2f}"
            f"{cpu * 1000:>9.0f}{cpu / ref_cpu:>7.2f}"
        )


if __name__ == "__main__":
    main()
