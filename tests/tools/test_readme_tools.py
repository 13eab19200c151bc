"""The README's Tools section runs as written."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernos.boundary import call_tool
from kernos.runtime import load_config
from kernos.tools import load_catalog
from tests.test_readme import README, python_block


async def test_the_function_tool_example_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "release_tools", raising=False)
    (tmp_path / "release_tools.py").write_text(python_block("# release_tools.py"))
    text = README.read_text(encoding="utf-8")
    toml = text.split("```toml\n[agents.main]\n", 1)[1].split("```", 1)[0]
    (tmp_path / "kernos.toml").write_text("[agents.main]\n" + toml, encoding="utf-8")
    catalog = load_catalog(load_config(cwd=tmp_path))
    tools = {e.spec.name: e for e in catalog.for_agent("main")}
    assert list(tools) == ["read_file", "search_files", "bump_version"]
    bump = tools["bump_version"]
    assert (bump.source, bump.summary) == ("function", "Bump a semantic version")
    result = await call_tool(bump.spec, {"version": "1.4.2", "part": ""})
    assert result.text == "1.4.3"
    assert (await call_tool(bump.spec, {"version": "1.4.2", "part": "minor"})).text == "1.5.0"
