"""A webhook URL whose path and query carry the token, echoed back by a failing
receiver, never reaches the model's receipt, the turns table, kernos.log, a cassette or stdout."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from kernos.output import OutputKernel
from kernos.runtime import load_config
from kernos.testing import FakeOpenAIServer, text, tool_call
from tests import _cli
from tests.output.conftest import Received, Receiver

PATH_TOKEN = "XXXXSECRETXXXX"
QUERY_TOKEN = "abc123secret"
TOKENS = (PATH_TOKEN, QUERY_TOKEN)


def echo_500(request: Received) -> tuple[int, str]:
    # a careless receiver that names the URL it was called on in its error body
    return 500, f'{{"error": "no such hook {request.path}", "token": "{QUERY_TOKEN}"}}'


@pytest.fixture
def leaky() -> Receiver:
    peer = Receiver(respond=echo_500).start()
    yield peer  # type: ignore[misc]
    peer.stop()


def project(tmp_path: Path, receiver: Receiver) -> Path:
    url = f"{receiver.url}/hooks/T000/B000/{PATH_TOKEN}?token={QUERY_TOKEN}"
    (tmp_path / "kernos.toml").write_text(
        f'[channels.hook]\nkind = "webhook"\nurl = "{url}"\n', encoding="utf-8"
    )
    return tmp_path


def kernos(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("KERNOS_MODEL", "OPENAI_API_KEY")}
    full = {**base, "KERNOS_HOME": str(cwd / ".kernos"), **(env or {})}
    return _cli.kernos(*args, cwd=cwd, env=full, timeout=60)


def assert_clean(where: str, content: str) -> None:
    for token in TOKENS:
        assert token not in content, f"{token} leaked into {where}: {content[:400]!r}"


def test_webhook_token_never_reaches_receipt_turns_log_or_cassette(
    server: FakeOpenAIServer, leaky: Receiver, tmp_path: Path
) -> None:
    cwd = project(tmp_path, leaky)
    server.script(
        tool_call("output_send__hook", {"payload": "deploy done"}),
        text("Reported.", when="HTTP 500"),
    )
    cassette = tmp_path / "run.json"
    result = kernos(
        "run", "report", "-m", "openai-chat:x", "--record", str(cassette),
        cwd=cwd, env=server.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert leaky.received, "the receiver was never called"
    receipt = server.tool_results()[0]
    assert "HTTP 500" in receipt and "[redacted]" in receipt
    assert_clean("the model's receipt", receipt)
    assert_clean("stderr", result.stderr)
    assert_clean("stdout", result.stdout)
    with sqlite3.connect(cwd / ".kernos" / "kernos.db") as db:
        rows = db.execute("SELECT text, tool_calls, tool_results FROM turns").fetchall()
    assert rows
    assert_clean("the turns table", repr(rows))
    log = (cwd / ".kernos" / "kernos.log").read_text(encoding="utf-8")
    assert "HTTP 500" in log
    assert_clean("kernos.log", log)
    assert_clean("the cassette", cassette.read_text(encoding="utf-8"))


def test_webhook_token_never_reaches_kernos_send_stdout(leaky: Receiver, tmp_path: Path) -> None:
    cwd = project(tmp_path, leaky)
    result = kernos("send", "hook", "hello", cwd=cwd)
    assert result.returncode == 1, result.stderr
    assert "HTTP 500" in result.stdout
    assert_clean("kernos send stdout", result.stdout)
    assert_clean("kernos send stderr", result.stderr)
    log = (cwd / ".kernos" / "kernos.log").read_text(encoding="utf-8")
    assert_clean("kernos.log", log)


async def test_webhook_channel_declares_its_url_tokens(leaky: Receiver, tmp_path: Path) -> None:
    kernel = OutputKernel.from_config(load_config(cwd=project(tmp_path, leaky)), hooks=())
    channel = kernel.channels["hook"]
    assert set(TOKENS) <= set(channel.secrets)
    receipt = await kernel.send("hook", "hello")
    assert "HTTP 500" in receipt.text
    assert_clean("the receipt", receipt.text)


def test_apprise_and_webhook_share_one_url_helper() -> None:
    from kernos.output.channels import _apprise, _webhook
    from kernos.runtime import url_secrets

    assert _apprise.url_secrets is url_secrets
    assert _webhook.url_secrets is url_secrets


async def test_a_token_cut_by_the_200_character_limit_is_still_scrubbed(tmp_path: Path) -> None:
    def straddling(request: Received) -> tuple[int, str]:
        return 500, "e" * 195 + PATH_TOKEN  # the cut at 200 falls inside the token

    peer = Receiver(respond=straddling).start()
    try:
        kernel = OutputKernel.from_config(load_config(cwd=project(tmp_path, peer)), hooks=())
        receipt = await kernel.send("hook", "hello")
    finally:
        peer.stop()
    assert "HTTP 500: eeee" in receipt.text
    assert PATH_TOKEN[:4] not in receipt.text
