"""A model's context window (runtime/_config/_windows.py): the declared ``context_window`` wins, 0
turns automatic compaction off, else genai-prices' bundled data gives a known model its window, else
there is none; ``kernos config check`` shows each model's window and where it came from."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from genai_prices import data

from kernos.runtime import Config, ModelWindow, known_window
from kernos.runtime._rules._compaction import CompactSettings
from tests import _cli


def data_window(provider: str, model: str) -> int:
    """The window genai-prices' own data gives ``model`` (read here, not hard-coded)."""
    found = next(p for p in data.providers if p.id == provider)
    window = next(m for m in found.models if m.id == model).context_window
    assert isinstance(window, int) and window > 0
    return window


GPT_4O = data_window("openai", "gpt-4o")


@pytest.mark.parametrize("prefix", ["openai-chat", "openai"])
def test_a_known_openai_model_gets_its_window(prefix: str) -> None:
    assert known_window(prefix, "gpt-4o") == GPT_4O
    config = Config()
    assert config.model_window(f"{prefix}:gpt-4o") == ModelWindow(GPT_4O, "known: genai-prices")
    assert config.compaction(f"{prefix}:gpt-4o") == CompactSettings(GPT_4O)


def test_an_alias_of_a_known_model_gets_its_window() -> None:
    claude = data_window("anthropic", "claude-sonnet-4-5")
    config = Config.model_validate(
        {
            "models": {
                "big": {"model": "openai-chat:gpt-4o", "api_key_env": "K"},
                "hosted": {"model": "openai-chat:gpt-4o", "base_url": "https://api.openai.com/v1"},
                "claude": {"model": "anthropic:claude-sonnet-4-5"},
            }
        }
    )
    assert config.model_window("big").window == GPT_4O
    assert config.model_window("hosted").window == GPT_4O
    assert config.model_window("claude") == ModelWindow(claude, "known: genai-prices")


def test_an_unknown_model_gets_none() -> None:
    assert known_window("openai-chat", "no-such-model-anywhere") is None
    assert known_window("no-such-provider", "gpt-4o") is None
    config = Config.model_validate({"models": {"local": {"model": "openai-chat:qwen3"}}})
    assert config.model_window("local") == ModelWindow(None)
    assert config.model_window("openai-chat:no-such-model") == ModelWindow(None)
    assert config.model_window("replay:cassette.json") == ModelWindow(None)
    assert config.compaction("local") is None


def test_a_known_name_on_a_local_server_is_not_that_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local server serving a model under a known name has its own window: unknown."""
    config = Config.model_validate(
        {"models": {"local": {"model": "openai-chat:gpt-4o", "base_url": "http://127.0.0.1:9/v1"}}}
    )
    assert config.model_window("local") == ModelWindow(None)
    assert config.model_window("openai-chat:gpt-4o").window == GPT_4O
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert config.model_window("openai-chat:gpt-4o") == ModelWindow(None)


def test_an_explicit_zero_turns_automatic_compaction_off() -> None:
    config = Config.model_validate(
        {"models": {"big": {"model": "openai-chat:gpt-4o", "context_window": 0}}}
    )
    assert config.model_window("big") == ModelWindow(0, "declared")
    assert config.compaction("big") is None
    assert config.compaction("big", manual=True) == CompactSettings(0)  # by hand it still can


def test_a_declared_window_wins() -> None:
    config = Config.model_validate(
        {"models": {"big": {"model": "openai-chat:gpt-4o", "context_window": 32768}}}
    )
    assert config.model_window("big") == ModelWindow(32768, "declared")
    assert config.compaction("big") == CompactSettings(32768)


def test_a_negative_window_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="context_window"):
        Config.model_validate({"models": {"big": {"model": "openai-chat:x", "context_window": -1}}})


CONFIG = """
default_model = "big"

[models.big]
model = "openai-chat:gpt-4o"
api_key_env = "CHECK_KEY"

[models.small]
model = "openai-chat:gpt-4o"
api_key_env = "CHECK_KEY"
context_window = 32768

[models.off]
model = "openai-chat:gpt-4o"
api_key_env = "CHECK_KEY"
context_window = 0

[models.local]
model = "openai-chat:qwen3"
base_url = "http://127.0.0.1:9/v1"
"""


def test_config_check_shows_each_models_window_and_where_it_came_from(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "KERNOS_"))}
    env |= {"KERNOS_HOME": str(tmp_path / ".kernos"), "CHECK_KEY": "k"}

    def check(*args: str) -> subprocess.CompletedProcess[str]:
        return _cli.kernos("config", "check", *args, cwd=tmp_path, env=env, timeout=120)

    done = check()
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("model ")]
    assert lines == [
        f"model big: context window {GPT_4O} (known: genai-prices)",
        "model small: context window 32768 (declared)",
        "model off: context window 0 (declared: automatic compaction off)",
        "model local: context window unknown (no automatic compaction; declare context_window)",
    ]
    windows = json.loads(check("--json").stdout)["windows"]
    assert windows == {
        "big": {"context_window": GPT_4O, "source": "known: genai-prices"},
        "small": {"context_window": 32768, "source": "declared"},
        "off": {"context_window": 0, "source": "declared"},
        "local": {"context_window": None, "source": None},
    }
