"""`[models.NAME] price = {input, output}` (USD per million tokens): a model genai-prices does not
know gets a cost in `kernos run`'s summary, `run --json` and `kernos usage`; a configured price wins
over genai-prices'; a bad price is a config error `kernos config check` reports."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kernos.runtime import load_config
from kernos.runtime._session._usage import reprice
from kernos.testing import FakeOpenAIServer, text
from tests import _cli


def kernos(project: Path, server: FakeOpenAIServer, *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("KERNOS_MODEL", "OPENAI_BASE_URL")}
    env = {**base, **server.env(), "KERNOS_HOME": str(project / ".kernos")}
    return _cli.kernos(*args, cwd=project, env=env, timeout=60)


def priced(model: str, price: str) -> str:
    return f'default_model = "local"\n[models.local]\nmodel = "{model}"\nprice = {price}\n'


def test_a_local_model_with_a_price_has_a_cost(tmp_path: Path, server: FakeOpenAIServer) -> None:
    (tmp_path / "kernos.toml").write_text(
        priced("openai-chat:qwen3", "{ input = 1000, output = 2000 }")
    )
    server.script(text("done"))
    run = kernos(tmp_path, server, "run", "hi", "--json")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    used = document["usage"]
    expected = (used["input_tokens"] * 1000 + used["output_tokens"] * 2000) / 1e6
    assert document["cost"] == pytest.approx(expected) and expected > 0
    assert run.stderr.splitlines()[-1].endswith(f"cost ${expected:.4f}")
    usage = json.loads(kernos(tmp_path, server, "usage", "--json").stdout)
    assert usage["total"]["cost"] == pytest.approx(expected)
    (group,) = usage["groups"]
    assert group["model"] == "qwen3" and group["cost"] == pytest.approx(expected)


def test_zero_is_a_price_and_wins_over_genai_prices(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    (tmp_path / "kernos.toml").write_text(priced("openai-chat:gpt-4o", "{ input = 0, output = 0 }"))
    server.script(text("free"))
    run = kernos(tmp_path, server, "run", "hi", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["cost"] == 0.0  # genai-prices would charge gpt-4o
    assert run.stderr.splitlines()[-1].endswith("cost $0.0000")
    assert json.loads(kernos(tmp_path, server, "usage", "--json").stdout)["total"]["cost"] == 0


@pytest.mark.parametrize(
    ("price", "shown"),
    [
        ("{ input = -1, output = 0.6 }", "models.local.price.input"),
        ('{ input = "0.15", output = 0.6 }', "models.local.price.input"),
        ("{ input = 0.15 }", "models.local.price.output"),
        ("{ input = 0.15, output = 0.6, outptu = 1 }", "models.local.price.outptu"),
    ],
)
def test_a_bad_price_is_a_config_error(
    tmp_path: Path, server: FakeOpenAIServer, price: str, shown: str
) -> None:
    (tmp_path / "kernos.toml").write_text(priced("openai-chat:qwen3", price))
    check = kernos(tmp_path, server, "config", "check")
    assert check.returncode == 2
    assert check.stdout.count(shown) == 1, check.stdout  # said once, not "missing" too


def test_cached_tokens_at_their_own_price(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        priced("openai-chat:qwen3", "{ input = 2, output = 4, cached = 1 }")
    )
    prices = load_config(tmp_path / "kernos.toml").prices()
    assert sorted(prices) == ["local", "openai-chat:qwen3", "qwen3"]
    row = {"model": "qwen3", "input_tokens": 1_000_000, "output_tokens": 1_000_000,
           "cached_tokens": 500_000, "cost": None}  # fmt: skip
    other = {**row, "model": "unpriced"}
    assert [r["cost"] for r in reprice([row, other], prices)] == [0.5 * 2 + 0.5 * 1 + 4, None]
