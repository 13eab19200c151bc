"""The README's examples run as written (a newcomer copies them)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kernos.output import ChannelConfig, OutputKernel
from kernos.runtime import ConfigError

README = Path(__file__).resolve().parents[1] / "README.md"


def python_block(first_line_prefix: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    (block,) = [b for b in blocks if b.startswith(first_line_prefix)]
    return str(block).replace("...  # deliver", "pass  # deliver")


async def test_the_channel_plugin_example_works() -> None:
    namespace: dict[str, Any] = {}
    exec(python_block("# my_plugin.py"), namespace)
    channel = namespace["pager"](ChannelConfig("pager", "pager", {"number": "+4712345678"}))
    receipt = await OutputKernel([channel]).send("pager", ["disk full", "graph"], ["text", "image"])
    assert receipt.text.splitlines()[:3] == [
        "sent 1/2 messages via [pager]:",
        "[1] text ok",
        "[2] image failed: unsupported type 'image'; this channel sends: text",
    ]
    with pytest.raises(ConfigError, match="unknown key 'numbr'"):
        namespace["pager"](ChannelConfig("pager", "pager", {"numbr": "1"}))


def test_readme_names_the_two_commands_and_ci_runs_the_test_one() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make demo" in text and "make test" in text
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci


def test_the_local_server_configs_pass_config_check(tmp_path: Path) -> None:
    import os
    import subprocess
    import tomllib

    from tests.conftest import KERNOS

    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(# kernos.toml for .*?)```", text, flags=re.S)
    assert [b.split()[3] for b in blocks] == ["Ollama", "vLLM", "llama.cpp"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "KERNOS_MODEL"))}
    for block in blocks:
        assert tomllib.loads(block)["default_model"] == "local"
        (tmp_path / "kernos.toml").write_text(block, encoding="utf-8")
        done = subprocess.run(
            [KERNOS, "config", "check"],
            cwd=tmp_path,
            env={**env, "KERNOS_HOME": str(tmp_path / ".kernos")},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, block + done.stdout + done.stderr


def test_the_readme_links_the_generated_config_reference() -> None:
    text = README.read_text(encoding="utf-8")
    assert "[docs/config.md](docs/config.md)" in text
    assert (README.parent / "docs" / "config.md").is_file()
