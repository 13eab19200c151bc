"""spec/runtime.md §2: model strings, aliases, the OpenAI-compatible environment, no model."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.models.openai import OpenAIChatModel

from kernos.runtime import (
    NO_MODEL_MESSAGE,
    Config,
    ConfigError,
    ModelAlias,
    NoModelError,
    ReplayModel,
    pick_model_name,
    resolve_model,
)


def test_missing_model_message_says_how_to_set_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNOS_MODEL", raising=False)
    with pytest.raises(NoModelError) as info:
        pick_model_name(None, Config())
    assert (
        str(info.value)
        == NO_MODEL_MESSAGE
        == (
            "no model configured: pass --model, set KERNOS_MODEL, "
            "or set default_model in kernos.toml"
        )
    )


def test_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    config = Config(default_model="from-config")
    monkeypatch.delenv("KERNOS_MODEL", raising=False)
    assert pick_model_name(None, config) == "from-config"
    monkeypatch.setenv("KERNOS_MODEL", "from-env")
    assert pick_model_name(None, config) == "from-env"
    assert pick_model_name(None, config, "from-agent") == "from-agent"
    assert pick_model_name("explicit", config, "from-agent") == "explicit"


def test_openai_chat_honours_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    model = resolve_model("openai-chat:qwen3", Config())
    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "qwen3"
    assert str(model.client.base_url).startswith("http://127.0.0.1:9/v1")


def test_openai_chat_without_key_or_base_url_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="export OPENAI_API_KEY"):
        resolve_model("openai-chat:x", Config())


def test_alias_with_base_url_and_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_API_KEY", "ollama")
    config = Config(
        models={
            "fast": ModelAlias(
                model="openai-chat:qwen3",
                base_url="http://127.0.0.1:11434/v1",
                api_key_env="OLLAMA_API_KEY",
            )
        }
    )
    model = resolve_model("fast", config)
    assert isinstance(model, OpenAIChatModel)
    assert str(model.client.base_url).startswith("http://127.0.0.1:11434/v1")
    assert model.client.api_key == "ollama"
    monkeypatch.delenv("OLLAMA_API_KEY")
    with pytest.raises(ConfigError, match=r"models\.fast\.api_key_env"):
        resolve_model("fast", config)


def test_unknown_names_fail_with_a_fix() -> None:
    with pytest.raises(ConfigError, match="neither a provider:model string nor a configured alias"):
        resolve_model("gpt", Config())
    with pytest.raises(ConfigError, match="cannot use"):
        resolve_model("nosuchprovider:model", Config())


def test_replay_models(tmp_path: Path) -> None:
    cassette = tmp_path / "c.json"
    cassette.write_text('{"version": 1, "turns": []}')
    assert isinstance(resolve_model(f"replay:{cassette}", Config()), ReplayModel)
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_model(f"replay:{tmp_path / 'none.json'}", Config())
