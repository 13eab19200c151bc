"""A model request that fails is one line naming the model, its endpoint and the fix: exit 2 for
what configuration must fix, 1 for a run that failed on the way (runtime/_models/_model_errors.py).
"""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer, error, text, tool_call
from tests.cli.test_run import kernos

SECRET = "sk-test-0123456789abcdefSECRET"


@dataclass(frozen=True)
class Case:
    name: str
    exit_code: int
    says: tuple[str, ...]
    url: str = "server"  # server, refused, dns, tls
    status: int | None = None
    requests: int | None = None  # how many the server saw (the retries spent)


CASES = [
    Case(
        "401",
        2,
        ("rejected the API key (HTTP 401)", "set MY_KEY (models.m.api_key_env)"),
        status=401,
        requests=1,
    ),
    Case("403", 2, ("refused access (HTTP 403)", "MY_KEY"), status=403, requests=1),
    Case(
        "404",
        2,
        ("was not found (HTTP 404)", "'qwen3'", "models.m.base_url"),
        status=404,
        requests=1,
    ),
    Case("429", 1, ("rate limited (HTTP 429)", "after the retries"), status=429, requests=2),
    Case("500", 1, ("failed with HTTP 500 after the retries",), status=500, requests=2),
    Case(
        "refused",
        1,
        ("refused the connection", "start the model server", "models.m.base_url"),
        url="refused",
    ),
    Case(
        "dns", 1, ("could not be resolved", "kernos-test.invalid", "models.m.base_url"), url="dns"
    ),
    Case("tls", 1, ("TLS handshake", "use an http:// URL"), url="tls"),
    Case("timeout", 1, ("did not answer in time", "models.m.request_timeout"), requests=2),
]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_failed_model_request_is_one_line_with_the_fix(
    case: Case, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    held = threading.Event()
    port = server.base_url.rsplit(":", 1)[1].split("/")[0]
    url = {
        "server": server.base_url,
        "refused": f"http://127.0.0.1:{_closed_port()}/v1",
        "dns": "http://kernos-test.invalid/v1",
        "tls": f"https://127.0.0.1:{port}/v1",
    }[case.url]
    if case.status is not None:
        server.script(
            error(case.status, "Incorrect API key provided: {api_key}", repeat=True, retry_after=0)
        )
    elif case.name == "timeout":
        server.script(text("too late", hold=held, repeat=True))
    (tmp_path / "kernos.toml").write_text(
        "[models.m]\n"
        'model = "openai-chat:qwen3"\n'
        f'base_url = "{url}"\n'
        'api_key_env = "MY_KEY"\n'
        "request_retries = 1\n"
        "request_timeout = 1.0\n"
    )
    try:
        result = kernos("run", "hi", "-m", "m", cwd=tmp_path, env={"MY_KEY": SECRET})
    finally:
        held.set()
    assert result.returncode == case.exit_code, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: the run failed: "), line
    for phrase in case.says:
        assert phrase in line, line
    if case.url != "dns":
        assert "127.0.0.1:" in line, line  # the endpoint
    assert "model m" in line, line
    assert SECRET not in result.stderr
    assert "status_code" not in line and "Error:" not in line, line  # no Python repr
    if case.requests is not None:
        assert len(server.requests) == case.requests


def test_a_provider_without_its_key_names_the_variable(tmp_path: Path) -> None:
    result = kernos("run", "hi", "-m", "openai:gpt-5-mini", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "OPENAI_API_KEY" in result.stderr
    assert "model openai:gpt-5-mini needs an API key" in result.stderr
    assert "OpenAIProvider(" not in result.stderr and "Agent('test')" not in result.stderr


def test_empty_answers_are_retried_then_end_the_run_with_one_line(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.script(text("", repeat=True))
    (tmp_path / "kernos.toml").write_text(
        f'[models.m]\nmodel = "openai-chat:qwen3"\nbase_url = "{server.base_url}"\n'
        "empty_retries = 1\n"
    )
    result = kernos("run", "hi", "-m", "m", cwd=tmp_path, env={"OPENAI_API_KEY": SECRET})
    assert result.returncode == 1, result.stderr
    assert len(server.requests) == 2  # one answer and one retry
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert "returned no text and no tool call 2 times in a row" in lines[0]
    assert "models.m.empty_retries" in lines[0]
    assert "UnexpectedModelBehavior" not in result.stderr
    assert "tokens: 0 in" not in result.stderr  # the usage of the empty answers is counted


def test_a_childs_failed_model_request_reaches_the_parent_as_the_line(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        'default_model = "openai-chat:x"\n\n'
        '[agents.explore]\ndescription = "d"\nmodel = "child"\n\n'
        f'[models.child]\nmodel = "openai-chat:small"\nbase_url = "{server.base_url}"\n'
        'api_key_env = "CHILD_KEY"\n'
    )
    server.script(
        tool_call("task", {"prompt": "TASK: look", "subagent_type": "explore"}, when="go"),
        error(401, "Incorrect API key provided: {api_key}", when="TASK:"),
        text("the child failed", when="rejected the API key"),
    )
    env = {**server.env(), "CHILD_KEY": SECRET}
    result = kernos("run", "go", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    seen = json.dumps(server.requests[-1]["messages"])
    assert "model child" in seen and "set CHILD_KEY (models.child.api_key_env)" in seen, seen
    assert SECRET not in seen and "ModelAuthenticationError" not in seen
