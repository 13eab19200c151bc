"""OAuth found rather than declared: an ``[mcp.NAME]`` url server with no ``auth`` key that
answers ``401`` with ``WWW-Authenticate: Bearer resource_metadata=...`` is an OAuth server
(tools/_mcp_auth.py ``oauth_challenge``): a run with no login stored refuses in one line naming
``kernos mcp login NAME``, the login starts the flow, and later runs use the stored login."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer, text, tool_call
from kernos.tools._mcp_auth import oauth_challenge
from tests._wait import wait_for
from tests.conftest import KERNOS
from tests.mcp._oauth import expire_login, log_in, run_search, token_file, write_config
from tests.mcp.conftest import kernos, kernos_env, toml_str
from tests.mcp.oauth_server import OAuthDocsServer


def write_plain_config(project: Path, docs: OAuthDocsServer) -> None:
    """``[mcp.docs]`` with its url only: nothing says it needs OAuth."""
    (project / "kernos.toml").write_text(f"[mcp.docs]\nurl = {toml_str(docs.url)}\n")


def test_an_oauth_challenge_is_a_401_bearer_naming_resource_metadata() -> None:
    meta = "http://127.0.0.1:1/.well-known/oauth-protected-resource/mcp"
    assert oauth_challenge(401, f'Bearer error="invalid_token", resource_metadata="{meta}"') == (
        meta
    )
    assert oauth_challenge(401, f"bearer resource_metadata={meta}, scope=x") == meta
    assert oauth_challenge(401, 'Bearer error="invalid_token"') is None  # names no metadata
    assert oauth_challenge(401, f'Basic resource_metadata="{meta}"') is None
    assert oauth_challenge(403, f'Bearer resource_metadata="{meta}"') is None
    assert oauth_challenge(401, None) is None


def test_a_run_on_an_undeclared_oauth_server_refuses_in_one_line_naming_the_login(
    docs: OAuthDocsServer, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    write_plain_config(tmp_path, docs)
    result = run_search(tmp_path, server)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "mcp.docs" in line and "asks for an OAuth login" in line
    assert "run `kernos mcp login docs`" in line
    assert server.requests == []
    status = kernos("mcp", "status", "--json", cwd=tmp_path)
    assert status.returncode == 1, status.stderr
    (row,) = json.loads(status.stdout)["servers"]
    assert (row["state"], row["fix"]) == ("needs_login", "run `kernos mcp login docs`")


def test_login_discovers_the_flow_and_later_runs_use_the_stored_login(
    docs: OAuthDocsServer, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    write_plain_config(tmp_path, docs)
    login = log_in(tmp_path)
    assert login.returncode == 0, login.stderr
    assert "logged in to [docs]: 2 tools" in login.stderr
    assert len(docs.auth.clients) == 1 and docs.auth.grants == ["authorization_code"]
    assert token_file(tmp_path).exists()
    result = run_search(tmp_path, server)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Two pages.\n"
    out = kernos("mcp", "logout", "docs", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert not token_file(tmp_path).exists()


# -- two processes refreshing one expiring login ----------------------------------------------
def waiting_on_lock(lock: Path) -> bool:
    """Whether some process waits for the ``flock`` on ``lock`` (Linux's /proc/locks lists a
    waiter with ``->``, by device and inode)."""
    if not lock.exists():
        return False
    inode = os.stat(lock).st_ino
    text = Path("/proc/locks").read_text()
    return any("->" in line and f":{inode} " in line for line in text.splitlines())


def start_search(project: Path, model: FakeOpenAIServer) -> subprocess.Popen[str]:
    model.script(
        tool_call("docs__search", '{"query": "oauth"}'),
        text("Two pages.", when="docs: 2 pages"),
    )
    return subprocess.Popen(
        [KERNOS, "run", "Search the docs.", "-m", "openai-chat:x"],
        cwd=project,
        env=kernos_env(project, model.env()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_two_processes_refreshing_one_login_never_spend_one_refresh_token_twice(
    docs: OAuthDocsServer, tmp_path: Path
) -> None:
    write_config(tmp_path, docs)
    assert log_in(tmp_path).returncode == 0
    expire_login(tmp_path, docs)
    saved = token_file(tmp_path)
    # the first refresh waits at the token endpoint until the second process is either there
    # too (both spending the same token) or waiting for the lock the first one holds
    docs.auth.hold_refresh = threading.Event()
    lock = saved.with_name(saved.name + ".lock")
    with FakeOpenAIServer() as model_a, FakeOpenAIServer() as model_b:
        first = start_search(tmp_path, model_a)
        second: subprocess.Popen[str] | None = None
        try:
            wait_for(lambda: docs.auth.presented, "the first refresh", alive=[first])
            second = start_search(tmp_path, model_b)
            wait_for(
                lambda: len(docs.auth.presented) > 1 or waiting_on_lock(lock),
                "the second process at the token endpoint or at the lock",
                alive=[first, second],
            )
            docs.auth.hold_refresh.set()
            outs = [p.communicate(timeout=120) for p in (first, second)]
        finally:
            docs.auth.hold_refresh.set()
            for process in (first, second):
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait()
    assert docs.auth.reused() == []
    for process, (out, err) in zip((first, second), outs, strict=True):
        assert (process.returncode, out) == (0, "Two pages.\n"), err
    fresh = json.loads(saved.read_text())["tokens"]["refresh_token"]
    assert fresh in docs.auth.refresh  # the newest, unspent, is the one stored
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
