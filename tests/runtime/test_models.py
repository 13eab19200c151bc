"""Model strings, aliases, the OpenAI-compatible environment, no model."""

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
from kernos.runtime._models._chat import OpenAIChat


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
    assert isinstance(model, OpenAIChat)
    assert model.model_name == "qwen3"
    assert model.base_url == "http://127.0.0.1:9/v1/"
    assert not model.built  # pydantic-ai's model is made when pydantic-ai first needs it
    assert isinstance(model.wrapped, OpenAIChatModel)
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
    assert isinstance(model.wrapped, OpenAIChatModel)
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


@pytest.mark.parametrize(
    "name", ["gpt-5-mini", "gpt-4o", "o3-mini", "ft:gpt-4o-mini:org::abc", "qwen3", "llama-3.1-8b"]
)
def test_the_lean_profile_is_what_pydantic_ai_s_openai_model_has(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the lean engine shapes tool schemas from these two keys without making pydantic-ai's model
    # (and loading the openai SDK); a pydantic-ai upgrade that changes them fails here
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    model = resolve_model(f"openai-chat:{name}", Config())
    assert isinstance(model, OpenAIChat)
    lean = model.lean_profile()
    assert not model.built
    real = model.wrapped.profile
    assert lean["json_schema_transformer"] is real["json_schema_transformer"]
    assert lean["openai_supports_strict_tool_definition"] == real.get(
        "openai_supports_strict_tool_definition", True
    )


def test_an_openai_chat_model_is_one_layer_to_kernos_and_a_whole_model_to_pydantic_ai(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernos.runtime._models._chat import inner_layer
    from kernos.runtime._models._clean import clean_model

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    model = resolve_model("openai-chat:m", Config())
    cleaned = clean_model(model)  # walks the layers: stops at the chat model
    assert inner_layer(model) is None and not model.built
    assert model == model and model != resolve_model("openai-chat:m", Config())
    assert repr(model) == "OpenAIChat('m', base_url='http://127.0.0.1:9/v1/')"
    assert cleaned.model_name == "m" and cleaned.system == "openai" and not model.built
    assert cleaned.model_id == "openai:m"  # forwarded: pydantic-ai's model is made now
    assert model.built
