"""OAuth for remote MCP servers, end to end against a real OAuth-protected MCP server on loopback
(the SDK's server auth pieces, tests/mcp/oauth_server.py): `kernos mcp login` with a test HTTP
client as the browser, runs that use and refresh the stored tokens, runs that refuse early, and
`kernos mcp status` / `logout`."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.mcp._oauth import expire_login, log_in, run_search, token_file, write_config
from tests.mcp.conftest import kernos, tool_data
from tests.mcp.oauth_server import (
    ANSWER,
    SCOPE,
    WRITE_SCOPE,
    OAuthDocsServer,
)


def test_login_stores_private_tokens_and_a_run_calls_the_server_with_them(
    docs: OAuthDocsServer, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    write_config(tmp_path, docs)
    login = log_in(tmp_path)
    assert login.returncode == 0, login.stderr
    assert "logged in to [docs]: 2 tools" in login.stderr
    # discovery, dynamic registration and PKCE went through the server's own endpoints
    assert len(docs.auth.clients) == 1
    assert docs.auth.grants == ["authorization_code"]
    saved = token_file(tmp_path)
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    record = json.loads(saved.read_text())
    access = record["tokens"]["access_token"]
    assert access in docs.auth.access
    assert record["expires_at"] > time.time()

    result = run_search(tmp_path, server)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Two pages.\n"
    source, answer = tool_data(server.tool_results()[0])
    assert (source, answer) == ("mcp:docs", ANSWER.format(query="oauth"))
    # no token reaches any log, nor the terminal
    log = (tmp_path / ".kernos" / "kernos.log").read_text()
    for secret in (access, record["tokens"]["refresh_token"]):
        assert secret not in log + result.stderr + login.stderr
    assert docs.auth.grants == ["authorization_code"]  # a valid token: no refresh


def test_an_expired_token_is_refreshed_silently_and_saved_back(
    docs: OAuthDocsServer, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    write_config(tmp_path, docs)
    assert log_in(tmp_path).returncode == 0
    record = expire_login(tmp_path, docs)
    saved = token_file(tmp_path)

    result = run_search(tmp_path, server)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Two pages.\n"
    assert docs.auth.grants == ["authorization_code", "refresh_token"]
    fresh = json.loads(saved.read_text())
    assert fresh["tokens"]["access_token"] != record["tokens"]["access_token"]
    assert fresh["tokens"]["access_token"] in docs.auth.access
    assert fresh["expires_at"] > time.time()
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600


def test_a_run_without_a_login_refuses_before_any_model_request(
    docs: OAuthDocsServer, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    write_config(tmp_path, docs)
    result = run_search(tmp_path, server)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "mcp.docs" in lines[0]
    assert "kernos mcp login docs" in lines[0]
    assert server.requests == []
    assert docs.auth.clients == {}  # nothing was even attempted


def test_a_run_whose_refresh_fails_refuses_without_waiting_for_a_browser(
    docs: OAuthDocsServer, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    write_config(tmp_path, docs)
    assert log_in(tmp_path).returncode == 0
    expire_login(tmp_path, docs)
    docs.auth.revoke_refresh()

    result = run_search(tmp_path, server)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "mcp.docs" in lines[0] and "kernos mcp login docs" in lines[0]
    assert server.requests == []
    assert len(docs.auth.authorizations) == 1  # the login's only: no new authorization began


def test_status_says_needs_login_then_connected_and_logout_forgets(
    docs: OAuthDocsServer, tmp_path: Path
) -> None:
    write_config(tmp_path, docs)
    before = kernos("mcp", "status", "--json", cwd=tmp_path)
    assert before.returncode == 1, before.stderr
    assert json.loads(before.stdout) == {
        "servers": [
            {
                "server": "docs",
                "state": "needs_login",
                "tools": 0,
                "reason": "no login is stored",
                "fix": "run `kernos mcp login docs`",
            }
        ]
    }
    plain = kernos("mcp", "status", cwd=tmp_path)
    assert plain.returncode == 1
    assert plain.stdout == "docs: needs login (no login is stored): run `kernos mcp login docs`\n"

    assert log_in(tmp_path).returncode == 0
    after = kernos("mcp", "status", "--json", cwd=tmp_path)
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["servers"][0] == {
        "server": "docs",
        "state": "connected",
        "tools": 2,
        "reason": None,
        "fix": None,
    }

    out = kernos("mcp", "logout", "docs", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "logged out of [docs]"
    assert not token_file(tmp_path).exists()
    again = kernos("mcp", "status", "--json", cwd=tmp_path)
    assert again.returncode == 1
    assert json.loads(again.stdout)["servers"][0]["state"] == "needs_login"


def test_status_reports_a_server_that_fails_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[mcp.gone]\nurl = "http://127.0.0.1:9/mcp"\ntimeout = 5\n'
    )
    result = kernos("mcp", "status", "--json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    (row,) = json.loads(result.stdout)["servers"]
    assert row["server"] == "gone" and row["state"] == "failed"
    assert "did not start" in row["reason"]


def test_login_names_a_server_that_cannot_use_oauth(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text('[mcp.plain]\ncommand = "true"\n')
    for args in (("login", "plain"), ("logout", "plain"), ("login", "nope")):
        result = kernos("mcp", *args, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "a command server" in kernos("mcp", "login", "plain", cwd=tmp_path).stderr
    assert "configured: plain" in kernos("mcp", "login", "nope", cwd=tmp_path).stderr


def test_the_token_file_is_replaced_atomically_and_stays_private(tmp_path: Path) -> None:
    import asyncio

    from mcp.shared.auth import OAuthToken

    from kernos.runtime import known_secrets
    from kernos.tools._mcp_auth import TokenFile

    path = tmp_path / "auth" / "docs.json"
    store = TokenFile(path, "http://127.0.0.1:1/mcp")
    old_umask = os.umask(0)
    try:
        asyncio.run(store.set_tokens(OAuthToken(access_token="access-one-123", expires_in=60)))
        first_inode = path.stat().st_ino
        asyncio.run(
            store.set_tokens(
                OAuthToken(access_token="access-two-456", refresh_token="refresh-two-789")
            )
        )
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_ino != first_inode  # a new file renamed over the old one
    assert [p.name for p in path.parent.iterdir()] == ["docs.json"]
    assert {"access-one-123", "access-two-456", "refresh-two-789"} <= known_secrets()
    # a file written for another URL is not this server's login
    assert TokenFile(path, "http://127.0.0.1:2/mcp").tokens() is None


def test_a_call_needing_more_scope_is_refused_with_the_login_to_run_which_asks_for_it(
    docs: OAuthDocsServer, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    write_config(tmp_path, docs)
    assert log_in(tmp_path).returncode == 0
    assert docs.auth.authorizations[-1].scopes == [SCOPE]
    server.script(
        tool_call("docs__publish", '{"page": "intro"}'),
        tool_call("docs__search", '{"query": "intro"}', when="needs scope docs.write"),
        text("I could not publish.", when="cannot be used in this run"),
    )
    result = kernos("run", "Publish intro.", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    refusal = server.tool_results()[0]  # kernos's own words: not delimited as server data
    assert refusal.startswith("`docs__publish` needs scope docs.write on MCP server [docs]")
    assert "kernos mcp login docs" in refusal
    # the refused step-up closed that server's connection: its other tools say why too
    later = server.tool_results()[1]
    assert "`docs__search` cannot be used in this run" in later
    assert "kernos mcp login docs" in later
    assert docs.auth.grants == ["authorization_code"]  # no new authorization began

    # the next login asks for the union of the scopes seen, and the call then goes through
    assert log_in(tmp_path).returncode == 0
    assert docs.auth.authorizations[-1].scopes == [SCOPE, WRITE_SCOPE]
    server.script(
        tool_call("docs__publish", '{"page": "intro"}'),
        text("Published.", when="published intro"),
    )
    again = kernos("run", "Publish intro.", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert again.returncode == 0, again.stderr
    assert again.stdout == "Published.\n"


def test_login_refuses_an_authorization_server_whose_metadata_names_another_issuer(
    docs: OAuthDocsServer, tmp_path: Path
) -> None:
    write_config(tmp_path, docs)
    docs.auth.wrong_issuer = "http://127.0.0.1:9"
    result = kernos("mcp", "login", "docs", cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "mcp.docs" in lines[0] and "issuer" in lines[0].lower()
    # nothing was registered, authorized or stored with the impostor's metadata
    assert docs.auth.clients == {} and docs.auth.authorizations == []
    assert not token_file(tmp_path).exists()
    # the SDK's account of it, traceback and all, is in kernos.log rather than on the terminal
    assert "issuer mismatch" in (tmp_path / ".kernos" / "kernos.log").read_text()


def test_a_revoked_access_token_is_refreshed_on_the_servers_401(
    docs: OAuthDocsServer, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    write_config(tmp_path, docs)
    assert log_in(tmp_path).returncode == 0
    docs.auth.expire_access()  # revoked: the stored expiry still says it is good
    result = run_search(tmp_path, server)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Two pages.\n"
    assert docs.auth.grants == ["authorization_code", "refresh_token"]
    assert len(docs.auth.authorizations) == 1
    saved = json.loads(token_file(tmp_path).read_text())
    assert saved["tokens"]["access_token"] in docs.auth.access


def test_a_revoked_token_that_cannot_be_refreshed_stops_the_run_early(
    docs: OAuthDocsServer, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    write_config(tmp_path, docs)
    assert log_in(tmp_path).returncode == 0
    docs.auth.expire_access()
    docs.auth.revoke_refresh()
    result = run_search(tmp_path, server)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "refused its token" in line and "kernos mcp login docs" in line
    assert server.requests == []


def test_login_state_and_server_status_are_pure_rules(tmp_path: Path) -> None:
    import asyncio

    from mcp.shared.auth import OAuthToken

    from kernos.errors import McpLoginNeeded, McpServerError
    from kernos.tools._mcp_auth import TokenFile, login_state
    from kernos.tools._mcp_login import server_status

    store = TokenFile(tmp_path / "docs.json", "http://127.0.0.1:1/mcp")
    assert login_state(store, now=0) == "no login is stored"
    asyncio.run(store.set_tokens(OAuthToken(access_token="short-lived-1", expires_in=60)))
    assert login_state(store, now=time.time()) is None
    assert login_state(store, now=time.time() + 120) == "its login expired and cannot be refreshed"
    asyncio.run(
        store.set_tokens(
            OAuthToken(access_token="short-lived-2", expires_in=60, refresh_token="refresh-2x")
        )
    )
    assert login_state(store, now=time.time() + 120) is None  # a run refreshes it

    needs = server_status("docs", McpLoginNeeded(None, "docs", "no login is stored"))
    assert (needs.state, needs.fix, needs.usable) == (
        "needs_login",
        "run `kernos mcp login docs`",
        False,
    )
    down = server_status("git", McpServerError(None, "mcp.git", "the server did not start", "x"))
    assert (down.state, down.reason) == ("failed", "the server did not start")
    up = server_status("time", ["a", "b"])
    assert (up.state, up.tools, up.usable) == ("connected", 2, True)
    assert up.line() == "time: connected (2 tools)"


def test_a_browser_is_opened_only_where_there_is_a_display(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from kernos.tools._mcp_login import has_display

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert not has_display()  # a server, a container, ssh: the URL is printed only
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    assert has_display()
    monkeypatch.delenv("WAYLAND_DISPLAY")
    monkeypatch.setenv("DISPLAY", ":0")
    assert has_display()


def test_a_configured_secret_is_sent_the_way_the_authorization_server_names(
    tmp_path: Path,
) -> None:
    from kernos.tools._mcp_auth import TokenFile, secret_method

    # RFC 8414: no list means client_secret_basic; basic wins when both are named
    assert secret_method(None) == "client_secret_basic"
    assert secret_method(["client_secret_basic"]) == "client_secret_basic"
    assert secret_method(["client_secret_post", "client_secret_basic"]) == "client_secret_basic"
    assert secret_method(["client_secret_post"]) == "client_secret_post"
    assert secret_method(["none", "private_key_jwt"]) == "client_secret_basic"
    # the way chosen at login is kept for a later process's refresh, which discovers nothing
    store = TokenFile(tmp_path / "docs.json", "http://127.0.0.1:1/mcp")
    assert store.secret_method() is None
    store.remember_secret_method("client_secret_post")
    assert TokenFile(tmp_path / "docs.json", "http://127.0.0.1:1/mcp").secret_method() == (
        "client_secret_post"
    )
