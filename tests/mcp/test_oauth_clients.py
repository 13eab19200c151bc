"""The two ways to log in without dynamic registration, through ``kernos mcp login`` against
the test authorization server (tests/mcp/oauth_server.py): a pre-registered public client
(``client_id``) and a client ID metadata document (``client_metadata_url``); a run then uses the
stored login and refreshes it under the same client id."""

from __future__ import annotations

import json
from pathlib import Path

from kernos.testing import FakeOpenAIServer
from tests.mcp._oauth import expire_login, log_in, run_search, token_file, write_config
from tests.mcp.oauth_server import OAuthDocsServer

CLIENT_ID = "kernos-cli"
CIMD_URL = "https://kernos.example/client-metadata.json"


def test_a_pre_registered_client_logs_in_without_registering(
    docs: OAuthDocsServer, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    docs.auth.preregistered.add(CLIENT_ID)
    write_config(tmp_path, docs, f'client_id = "{CLIENT_ID}"\n')
    login = log_in(tmp_path)
    assert login.returncode == 0, login.stderr
    assert "logged in to [docs]: 2 tools" in login.stderr
    assert docs.auth.clients == {}  # no dynamic registration
    assert docs.auth.authorized_clients == [CLIENT_ID]
    assert "client" not in json.loads(token_file(tmp_path).read_text())  # the config's, not stored
    expire_login(tmp_path, docs)
    result = run_search(tmp_path, server)
    assert (result.returncode, result.stdout) == (0, "Two pages.\n"), result.stderr
    assert docs.auth.grants == ["authorization_code", "refresh_token"]


def test_a_client_metadata_url_is_the_client_id_when_the_server_supports_it(
    docs: OAuthDocsServer, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    docs.auth.cimd = True
    write_config(tmp_path, docs, f'client_metadata_url = "{CIMD_URL}"\n')
    login = log_in(tmp_path)
    assert login.returncode == 0, login.stderr
    assert docs.auth.clients == {}  # no dynamic registration
    assert docs.auth.authorized_clients == [CIMD_URL]
    expire_login(tmp_path, docs)
    result = run_search(tmp_path, server)
    assert (result.returncode, result.stdout) == (0, "Two pages.\n"), result.stderr
    assert docs.auth.grants == ["authorization_code", "refresh_token"]


def test_a_client_metadata_url_falls_back_to_registration_where_unsupported(
    docs: OAuthDocsServer, tmp_path: Path
) -> None:
    write_config(tmp_path, docs, f'client_metadata_url = "{CIMD_URL}"\n')
    login = log_in(tmp_path)
    assert login.returncode == 0, login.stderr
    assert len(docs.auth.clients) == 1
    assert docs.auth.authorized_clients == list(docs.auth.clients)
