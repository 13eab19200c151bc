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
