"""The pure rules of ``kernos init`` (``kernos._starter``): which model a server lists,
which server it is, the ``.gitignore`` line, and a config text that loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernos._starter import (
    FoundServer,
    first_model,
    gitignore_with_state,
    render_config,
    server_kind,
)
from kernos.runtime import load_config


@pytest.mark.parametrize(
    ("body", "model"),
    [
        ({"data": [{"id": "qwen3"}, {"id": "llama"}]}, "qwen3"),
        ({"data": [{"id": " "}, {"id": "llama"}]}, "llama"),
        ({"data": []}, None),
        ({"models": [{"name": "qwen3:8b"}]}, "qwen3:8b"),
        ("not json", None),
        (None, None),
    ],
)
def test_first_model(body: object, model: str | None) -> None:
    assert first_model(body) == model


def test_server_kind_by_owner_else_by_port() -> None:
    assert server_kind({"data": [{"id": "m", "owned_by": "vllm"}]}, "llama.cpp") == "vLLM"
    assert server_kind({"data": [{"id": "m", "owned_by": "llamacpp"}]}) == "llama.cpp"
    assert server_kind({"data": [{"id": "m", "owned_by": "library"}]}) == "Ollama"
    assert server_kind({"data": [{"id": "m", "owned_by": "someone"}]}, "vLLM") == "vLLM"


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (None, ".kernos/\n"),
        ("", ".kernos/\n"),
        ("dist", "dist\n.kernos/\n"),
        ("dist\n", "dist\n.kernos/\n"),
        ("dist\n.kernos\n", None),
        ("/.kernos/\n", None),
        (".kernos-old/\n", ".kernos-old/\n.kernos/\n"),
    ],
)
def test_gitignore_with_state(before: str | None, after: str | None) -> None:
    assert gitignore_with_state(before) == after


@pytest.mark.parametrize(
    "server",
    [
        None,
        FoundServer("http://127.0.0.1:11434/v1", "qwen3:8b", "Ollama", "port 11434"),
        FoundServer("http://h:1/v1", 'odd "name"\\x', "", "OPENAI_BASE_URL", "OPENAI_API_KEY"),
    ],
)
def test_the_config_text_loads(tmp_path: Path, server: FoundServer | None) -> None:
    (tmp_path / "kernos.toml").write_text(render_config(server), encoding="utf-8")
    config = load_config(cwd=tmp_path)
    if server is None:
        assert config.default_model is None and config.models == {}
    else:
        assert config.default_model == "local"
        alias = config.models["local"]
        assert alias.model == f"openai-chat:{server.model}"
        assert alias.base_url == server.base_url
        assert alias.api_key_env == (server.api_key_env or None)
