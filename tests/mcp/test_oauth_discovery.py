"""OAuth found rather than declared: an ``[mcp.NAME]`` url server with no ``auth`` key that
answers ``401`` with ``WWW-Authenticate: Bearer resource_metadata=...`` is an OAuth server
(tools/_mcp_auth.py ``oauth_challenge``): a run with no login stored refuses in one line naming
``kernos mcp login NAME``, the login starts the flow, and later runs use the stored login."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer
from kernos.tools._mcp_auth import oauth_challenge
from tests.mcp.conftest import kernos, toml_str
from tests.mcp.oauth_server import OAuthDocsServer, oauth_docs_server
from tests.mcp.test_oauth import log_in, run_search, token_file


@pytest.fixture
def docs() -> Iterator[OAuthDocsServer]:
    with oauth_docs_server() as running:
        yield running


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
