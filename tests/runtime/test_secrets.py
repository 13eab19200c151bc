"""One scrubber knows every secret value kernos knows, and every outward text uses it.

Pure rules first (no I/O), then the red case (b) through the real paths: a provider key that is not
``sk-``-shaped, echoed in a 401 body, never reaches stderr, kernos.log, the compress ``--json``
report, ``tasks.error``, ``kernos tasks show`` or the parent model's tool result.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from kernos.boundary import ToolResult, ToolSpec
from kernos.runtime import (
    Session,
    Store,
    install_log_scrubber,
    known_secrets,
    load_config,
    redact,
    register_secrets,
    resolve_model,
    scrub_result,
    scrub_text,
    url_secrets,
)
from kernos.runtime._config._config import expand_env
from kernos.runtime._secrets import secret_field
from kernos.testing import FakeOpenAIServer, error, text, tool_call
from tests import _cli

KEY = "gsk_live0123456789abcdefGHIJ"  # Groq-style: no sk- prefix, so no shape rule knew it before
NO_SHAPE = "plainvalue-4f7a9c2e1b"  # a value no shape rule can know: only the registry can

# -- the rule (pure) ------------------------------------------------------------------------------


def test_registered_values_are_scrubbed_longest_first() -> None:
    register_secrets("abcdef123", "abcdef123456789")
    assert scrub_text("x abcdef123456789 y abcdef123 z") == "x [redacted] y [redacted] z"


def test_short_values_are_ignored_so_words_survive() -> None:
    register_secrets("hooks", "a", "", None, "   ")
    assert known_secrets() == frozenset()
    assert scrub_text("the hooks fired") == "the hooks fired"


def test_unknown_values_are_scrubbed_by_shape() -> None:
    shapes = [
        "sk-abcdefgh12345678",
        "sk-proj-abcdefgh12345678",
        "gsk_abcdefgh12345678",
        "ghp_abcdefgh12345678",
        "xoxb-1234-5678-abcdefgh",
        "Bearer abc.def.ghi.jkl",
        "AKIAABCDEFGHIJKLMNOP",
        "AIzaSyA1234567890abcdefghijklmn",
    ]
    for shape in shapes:
        assert scrub_text(f"error: {shape} rejected") == "error: [redacted] rejected", shape
    assert scrub_text("GET /x?api_key=short&page=2") == "GET /x?api_key=[redacted]&page=2"
    assert scrub_text("ask the skeptic a task-list") == "ask the skeptic a task-list"


def test_url_secrets_take_path_and_query_tokens_not_words_or_hosts() -> None:
    url = "http://127.0.0.1:8080/hooks/T000/B000/XXXXSECRETXXXX?token=abc123secret"
    found = set(url_secrets(url))
    assert {"XXXXSECRETXXXX", "abc123secret", url} <= found
    assert not found & {"hooks", "T000", "B000", "127.0.0.1", "8080", "token"}
    slack = set(url_secrets("https://hooks.slack.com/services/T0AB12CD/B0AB12CD/xyzSECRET99"))
    assert {"T0AB12CD", "B0AB12CD", "xyzSECRET99"} <= slack
    assert not slack & {"services", "hooks.slack.com"}
    # Apprise keeps tokens where a host would be, and credentials in the user part
    assert "123456789ABCD" in url_secrets("tgram://123456789ABCD/chat")
    assert "pa55w0rd" in url_secrets("mailto://someone:pa55w0rd@example.com")
    assert url_secrets("http://127.0.0.1:9000/hook") == ()


def test_redact_keeps_key_names_and_uses_the_registry() -> None:
    register_secrets(NO_SHAPE)
    row = {"api_key": "x", "text": f"echo {NO_SHAPE}", "list": [KEY]}
    assert redact(row) == {
        "api_key": "[redacted]",
        "text": "echo [redacted]",
        "list": ["[redacted]"],
    }


def test_tool_results_are_scrubbed_text_and_details() -> None:
    register_secrets(NO_SHAPE)
    result = ToolResult(f"failed: {NO_SHAPE}", {"error": f"body {NO_SHAPE}", "code": "x"}, True)
    clean = scrub_result(result)
    assert clean.text == "failed: [redacted]"
    assert clean.details == {"error": "body [redacted]", "code": "x"}
    assert clean.is_error
    plain = ToolResult("ok")
    assert scrub_result(plain) is plain


def test_log_records_of_every_kernos_logger_are_scrubbed(tmp_path: Path) -> None:
    install_log_scrubber()
    register_secrets(NO_SHAPE)
    handler = logging.FileHandler(tmp_path / "log", encoding="utf-8")
    logging.getLogger("kernos").addHandler(handler)
    try:
        child = logging.getLogger("kernos.tasks")
        child.warning("provider said %s", f"bad key {NO_SHAPE}")
        try:
            raise RuntimeError(f"401: {NO_SHAPE}")
        except RuntimeError:
            child.exception("run failed")
    finally:
        logging.getLogger("kernos").removeHandler(handler)
        handler.close()
    written = (tmp_path / "log").read_text(encoding="utf-8")
    assert "provider said bad key [redacted]" in written
    assert "RuntimeError: 401: [redacted]" in written
    assert NO_SHAPE not in written


# -- where values join the registry ---------------------------------------------------------------


def test_expanded_env_values_are_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_PASSWORD", NO_SHAPE)
    assert expand_env({"x": "p=${HOOK_PASSWORD}"}, None, "") == {"x": f"p={NO_SHAPE}"}
    assert scrub_text(f"login {NO_SHAPE} refused") == "login [redacted] refused"


def test_secrets_come_from_secret_places_not_from_every_expansion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEPLOY_ENV", "production")
    monkeypatch.setenv("HOME", "/home/alice-example")
    monkeypatch.setenv(
        "DOCS_VALUE", "docsheader-77aa"
    )  # neither name says "secret": the field does
    monkeypatch.setenv("BOT_VALUE", "bottokenvalue-88")
    monkeypatch.setenv("SERVICE_TOKEN", "servicetoken-99")  # the name says it, whatever the field
    (tmp_path / "kernos.toml").write_text(
        textwrap.dedent("""
            [agents.main]
            instructions = "Query the ${DEPLOY_ENV} database with ${SERVICE_TOKEN}."

            [mcp.git]
            command = "mcp-server-git"
            args = ["--repository", "${HOME}/src"]
            env = { GIT_CONFIG_GLOBAL = "${HOME}/.gitconfig" }

            [mcp.docs]
            url = "http://127.0.0.1:9/mcp"
            headers = { X-Docs = "${DOCS_VALUE}" }

            [channels.bot]
            kind = "webhook"
            url = "http://127.0.0.1:9/hook"
            token = "${BOT_VALUE}"
        """),
        encoding="utf-8",
    )
    config = load_config(cwd=tmp_path)
    assert (
        config.agents["main"].instructions == "Query the production database with servicetoken-99."
    )
    assert known_secrets() == {"docsheader-77aa", "bottokenvalue-88", "servicetoken-99"}
    said = "the production database at /home/alice-example/src"
    assert scrub_text(said) == said
    assert (
        scrub_text("sent docsheader-77aa and bottokenvalue-88") == "sent [redacted] and [redacted]"
    )


def test_double_dollar_is_the_literal_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SET_TOKEN", "settokenvalue-1")
    monkeypatch.delenv("UNSET_THING", raising=False)
    (tmp_path / "kernos.toml").write_text(
        '[agents.main]\ninstructions = "Write $${UNSET_THING} and $${SET_TOKEN}, '
        'not ${SET_TOKEN}."\n',
        encoding="utf-8",
    )
    config = load_config(cwd=tmp_path)
    assert config.agents["main"].instructions == (
        "Write ${UNSET_THING} and ${SET_TOKEN}, not settokenvalue-1."
    )
    assert expand_env({"a": "$$${SET_TOKEN}", "b": "$ {X} $$ {Y}"}, None, "") == {
        "a": "$${SET_TOKEN}",
        "b": "$ {X} $$ {Y}",
    }


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("mcp.docs.headers.Authorization", True),
        ("mcp.docs.headers.X-Trace", True),
        ("channels.qq.token", True),
        ("channels.mail.smtp_password", True),
        ("models.fast.api_key", True),
        ("tools.t.apiKey", True),
        ("mcp.git.env.GITHUB_TOKEN", True),
        ("agents.main.instructions", False),
        ("mcp.git.env.GIT_CONFIG_GLOBAL", False),
        ("mcp.git.args[1]", False),
        ("channels.log.path", False),
        ("agents.main.keywords", False),
    ],
)
def test_which_config_fields_hold_credentials(key: str, secret: bool) -> None:
    assert secret_field(key) is secret


async def test_a_header_secret_is_scrubbed_from_a_tool_result_and_the_log(
    openai_env: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCS_VALUE", NO_SHAPE)
    monkeypatch.setenv("DEPLOY_ENV", "production")
    (tmp_path / "kernos.toml").write_text(
        '[agents.main]\ninstructions = "On ${DEPLOY_ENV}."\n'
        '[mcp.docs]\nurl = "http://127.0.0.1:9/mcp"\n'
        'headers = { Authorization = "Bearer ${DOCS_VALUE}" }\n',
        encoding="utf-8",
    )
    config = load_config(cwd=tmp_path)
    install_log_scrubber()
    handler = logging.FileHandler(tmp_path / "log", encoding="utf-8")
    logging.getLogger("kernos").addHandler(handler)

    async def leak(params: _NoArgs, ctx: Any) -> str:
        logging.getLogger("kernos.mcp").warning("sent %s on production", NO_SHAPE)
        return f"header was {NO_SHAPE} on production"

    openai_env.script(tool_call("leak"), text("done", when="header was"))
    try:
        session = Session(
            resolve_model("openai-chat:x", config),
            config.agents["main"].instructions,
            tools=[ToolSpec("leak", "Leak a value.", _NoArgs, leak)],
        )
        assert await session.prompt("go") == "done"
    finally:
        logging.getLogger("kernos").removeHandler(handler)
        handler.close()
    assert openai_env.tool_results() == ["header was [redacted] on production"]
    assert openai_env.requests[0]["messages"][0]["content"] == "On production."
    written = (tmp_path / "log").read_text(encoding="utf-8")
    assert "sent [redacted] on production" in written and NO_SHAPE not in written


def test_config_urls_are_registered(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        textwrap.dedent("""
            [models.remote]
            model = "openai-chat:m"
            base_url = "http://127.0.0.1:1/v1?key=modelTOKEN42"

            [channels.hook]
            kind = "webhook"
            url = "http://127.0.0.1:1/hooks/HOOKtoken77"

            [channels.bot]
            kind = "onebot"
            base_url = "http://127.0.0.1:1/bot/BOTtoken99"
        """),
        encoding="utf-8",
    )
    load_config(cwd=tmp_path)
    assert {"modelTOKEN42", "HOOKtoken77", "BOTtoken99"} <= known_secrets()


def test_model_keys_are_registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[models.groq]\nmodel = "openai-chat:llama"\nbase_url = "http://127.0.0.1:1/v1"\n'
        'api_key_env = "MY_PROVIDER"\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("MY_PROVIDER", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", NO_SHAPE)
    config = load_config(cwd=tmp_path)
    resolve_model("groq", config)
    resolve_model("openai-chat:x", config)
    assert {KEY, NO_SHAPE} <= known_secrets()


def test_store_rows_are_scrubbed(tmp_path: Path) -> None:
    register_secrets(NO_SHAPE)
    store = Store(tmp_path / "k.db")
    try:
        store.record_turn("s", "main", "assistant", f"my key is {NO_SHAPE}")
        rows = store.query("SELECT text FROM turns")
    finally:
        store.close()
    assert rows[0][0] == "my key is [redacted]"


# -- red case (b): a gsk_ key echoed in a 401, through the real commands --------------------------

CONFIG = textwrap.dedent("""
    default_model = "openai-chat:x"

    [models.groq]
    model = "openai-chat:llama"
    base_url = "{base_url}"
    api_key_env = "GROQ_KEY"

    [categories.quick]
    description = "Small jobs."
    model = "groq"
""")

REJECT = "Incorrect API key provided: {api_key}. You can find your API key at console.groq.com"


def kernos(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("KERNOS_MODEL", "OPENAI_API_KEY")}
    full = {**base, "KERNOS_HOME": str(cwd / ".kernos"), "OPENAI_MAX_RETRIES": "0", **env}
    return _cli.kernos(*args, cwd=cwd, env=full, timeout=90)


def assert_clean(where: str, content: str) -> None:
    assert KEY not in content, f"the key leaked into {where}: {content[:400]!r}"
    assert KEY[4:] not in content, f"part of the key leaked into {where}: {content[:400]!r}"


def test_a_401_echoing_the_key_fails_the_run_without_showing_it(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.script(error(401, REJECT))
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY}
    result = kernos("run", "hello", "-m", "openai-chat:x", cwd=tmp_path, env=env)
    assert result.returncode == 2  # a rejected key is for the configuration to fix
    assert server.auth_headers == [f"Bearer {KEY}"]  # the key really went out
    assert "Incorrect API key provided: [redacted]" in result.stderr
    assert_clean("stderr", result.stderr)
    log = (tmp_path / ".kernos" / "kernos.log").read_text(encoding="utf-8")
    assert "failed" in log
    assert_clean("kernos.log", log)


def test_a_401_echoing_the_key_stays_out_of_the_compress_report(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG.format(base_url=server.base_url))
    (tmp_path / "prompt.md").write_text("Please always be very careful with the files.\n")
    server.script(error(401, REJECT))
    result = kernos(
        "compress", "prompt.md", "-m", "groq", "--json", "report.json", "--tokenizer", "bytes",
        cwd=tmp_path, env={"GROQ_KEY": KEY},
    )  # fmt: skip
    assert result.returncode == 1
    assert server.auth_headers == [f"Bearer {KEY}"]
    report = (tmp_path / "report.json").read_text(encoding="utf-8")
    assert "Incorrect API key provided: [redacted]" in json.loads(report)["files"][0]["error"]
    assert_clean("the --json report", report)
    assert_clean("stderr", result.stderr)
    log = tmp_path / ".kernos" / "kernos.log"
    assert_clean("kernos.log", log.read_text(encoding="utf-8") if log.exists() else "")


def test_a_child_on_an_aliased_key_fails_without_leaking_it(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG.format(base_url=server.base_url))
    spawn = {"prompt": "Count the files.", "description": "Count files", "category": "quick"}
    server.script(
        error(401, REJECT, when="Count the files."),
        tool_call("task", spawn, when="delegate"),
        text("The child failed.", when="rejected the API key"),
    )
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "parent-key", "GROQ_KEY": KEY}
    result = kernos("run", "delegate", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert f"Bearer {KEY}" in server.auth_headers  # the child really used the aliased key
    parent_saw = server.tool_results()
    assert parent_saw and "[redacted]" in parent_saw[0]
    assert_clean("the parent's tool result", "\n".join(parent_saw))
    assert_clean("stderr", result.stderr)
    with sqlite3.connect(tmp_path / ".kernos" / "kernos.db") as db:
        (task_id, status, err), *_ = db.execute("SELECT id, status, error FROM tasks").fetchall()
        everything = repr(db.execute("SELECT * FROM task_events").fetchall())
        turns = repr(db.execute("SELECT * FROM turns").fetchall())
    assert status == "error"
    assert "[redacted]" in err
    assert_clean("tasks.error", err)
    assert_clean("task_events", everything)
    assert_clean("turns", turns)
    shown = kernos("tasks", "show", task_id, cwd=tmp_path, env={})
    assert task_id in shown.stdout
    assert_clean("kernos tasks show", shown.stdout + shown.stderr)
    log = tmp_path / ".kernos" / "kernos.log"
    assert_clean("kernos.log", log.read_text(encoding="utf-8") if log.exists() else "")


# -- tool results: the one wrapper every tool result passes -------------------------------------


class _NoArgs(BaseModel):
    pass


async def test_a_tool_result_reaches_the_model_and_the_store_scrubbed(
    openai_env: FakeOpenAIServer, tmp_path: Path
) -> None:
    register_secrets(NO_SHAPE)

    async def leak(params: _NoArgs, ctx: Any) -> str:
        return f"connected with {NO_SHAPE}"

    openai_env.script(tool_call("leak"), text("done", when="connected"))
    store = Store(tmp_path / "k.db")
    try:
        session = Session(
            resolve_model("openai-chat:x", load_config(cwd=tmp_path)),
            tools=[ToolSpec("leak", "Leak a value.", _NoArgs, leak)],
            store=store,
        )
        assert await session.prompt("go") == "done"
        rows = repr(store.query("SELECT tool_results FROM turns"))
    finally:
        store.close()
    assert openai_env.tool_results() == ["connected with [redacted]"]
    assert NO_SHAPE not in rows


def test_a_cassette_match_is_scrubbed_before_it_is_cut(tmp_path: Path) -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from kernos.runtime._models._cassette import _turn_from_response

    register_secrets(NO_SHAPE)
    request = ModelRequest(parts=[UserPromptPart("p" * 110 + NO_SHAPE)])  # cut at 120: mid-value
    turn = _turn_from_response([request], ModelResponse(parts=[TextPart("ok")]))
    assert NO_SHAPE[:6] not in turn["match"]
    assert turn["match"].startswith("p" * 110 + "[red")
