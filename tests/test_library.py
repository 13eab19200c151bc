"""The README's library example runs as written: a plain pydantic-ai Agent gets kernos's task and
workspace tools through the boundary, hears a background child's completion, and a normalized
FunctionToolset never sees provider padding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernos.testing import FakeOpenAIServer, text, tool_calls
from tests.test_readme import python_block

CONFIG = """
[categories.quick]
description = "Small, fast edits"
instructions = "QUICK-WORKER: you summarise."
"""


async def test_the_library_example_works(
    openai_env: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    (tmp_path / "CHANGES.md").write_text("# Changes\n\n- 1.2.0: workspace tools.\n")
    monkeypatch.chdir(tmp_path)
    openai_env.script(
        # the parent: a padded greet, a background task and a read_file in one step
        tool_calls(
            ("greet", {"name": "Ada", "punctuation": ""}),
            ("task", {"prompt": "Summarise CHANGES.md", "category": "quick",
                      "run_in_background": True, "description": "", "load_skills": []}),
            ("read_file", {"path": "CHANGES.md", "offset": "", "limit": None}),
        ),
        text("CHILD-SUMMARY: workspace tools arrived", when="QUICK-WORKER", when_system=True),
        text("Started; waiting.", when="1.2.0"),
        text("Ada greeted; the child says workspace tools arrived.", when="CHILD-SUMMARY"),
    )  # fmt: skip
    namespace: dict[str, Any] = {"__name__": "my_program"}
    exec(python_block("# my_program.py").replace("gpt-5-mini", "x"), namespace)
    output = await namespace["main"]()
    assert output == "Ada greeted; the child says workspace tools arrived."
    tool_messages = [
        m for r in openai_env.requests for m in r["messages"] if m.get("role") == "tool"
    ]
    answers = {m["content"] for m in tool_messages}
    assert "Hello, Ada!" in answers  # "" for an optional field was normalized to its default
    assert any("1.2.0: workspace tools." in a for a in answers)  # read_file through the boundary
    offered = {t["function"]["name"] for t in openai_env.requests[0]["tools"]}
    assert {"greet", "task", "read_file", "task_output"} <= offered
