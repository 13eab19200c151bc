"""What an MCP server sends is bounded: results cut at ``max_result_bytes``, schemas too big or too
deep left out with one warning, structured content kept once, stray stdout lines summarised."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from kernos.boundary import call_tool, nesting_depth
from kernos.runtime import McpServerConfig
from kernos.testing import FakeOpenAIServer, text, tool_call
from kernos.tools import McpToolset
from kernos.tools._limits import cut_text, schema_problem
from tests.mcp.conftest import RECORDER, kernos, offered_tools

EXTRAS = {"RECORDER_EXTRAS": "1"}


def hostile(record: Path, env: dict[str, str] | None = None, **options: object) -> McpToolset:
    config = McpServerConfig(
        command=sys.executable,
        args=[str(RECORDER)],
        env={"RECORD_FILE": str(record), **EXTRAS, **(env or {})},
        **options,  # type: ignore[arg-type]
    )
    return McpToolset("rec", config)


def hostile_config(tmp_path: Path, extra: str = "", junk: int = 0) -> str:
    record = json.dumps(str(tmp_path / "calls.jsonl"))
    return (
        "[mcp.rec]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(RECORDER))}]\n"
        f'env = {{ RECORD_FILE = {record}, RECORDER_EXTRAS = "1", RECORDER_JUNK = "{junk}" }}\n'
        + extra
    )


# -- the pure rules ------------------------------------------------------------------------------


def test_cut_text_keeps_the_first_bytes_and_says_what_was_dropped() -> None:
    assert cut_text("short", 1024) == ("short", 0)
    cut, dropped = cut_text("é" * 1000, 1001)  # 2,000 bytes; a character cut in half goes
    assert cut.startswith("é" * 500 + "\n[result cut: 1,000 of 2,000 bytes dropped; ask the tool")
    assert dropped == 1000
    assert cut.endswith("a narrower query, a page, a limit]")


def test_depth_is_measured_without_recursion() -> None:
    value: object = "leaf"
    for _ in range(100_000):
        value = [value]
    assert nesting_depth(value, 32) == 33
    assert nesting_depth({"a": [1, {"b": 2}]}, 32) == 3
    assert schema_problem({"type": "object", "properties": {}}) is None


# -- results -------------------------------------------------------------------------------------


async def test_a_result_over_max_result_bytes_is_cut_with_a_marker(tmp_path: Path) -> None:
    async with hostile(tmp_path / "calls.jsonl", max_result_bytes=4096) as toolset:
        spec = {s.name: s for s in await toolset.tools()}["rec__big"]
        result = await call_tool(spec, {"bytes": 5_000_000})
    assert not result.is_error
    assert result.text == (
        "x" * 4096 + "\n[result cut: 4,995,904 of 5,000,000 bytes dropped; ask the tool for less: "
        "a narrower query, a page, a limit]"
    )
    assert result.details["cut_bytes"] == 4_995_904


async def test_the_default_cap_is_one_megabyte(tmp_path: Path) -> None:
    assert McpServerConfig(command="x").max_result_bytes == 1_048_576
    async with hostile(tmp_path / "calls.jsonl") as toolset:
        spec = {s.name: s for s in await toolset.tools()}["rec__big"]
        result = await call_tool(spec, {"bytes": 1_500_000})
    assert len(result.text.encode()) < 1_048_576 + 200
    assert "[result cut: 451,424 of 1,500,000 bytes dropped;" in result.text


async def test_structured_content_alone_becomes_the_text_once_and_is_cut(tmp_path: Path) -> None:
    async with hostile(tmp_path / "calls.jsonl", max_result_bytes=4096) as toolset:
        spec = {s.name: s for s in await toolset.tools()}["rec__structured"]
        small = await call_tool(spec, {"bytes": 10})
        big = await call_tool(spec, {"bytes": 2_000_000})
    assert json.loads(small.text) == {"data": "y" * 10}
    assert "structured" not in small.details  # not the text and the details both
    assert "[result cut:" in big.text
    assert "structured" not in big.details
    assert len(json.dumps(big.details)) < 1000


def test_a_run_sends_and_stores_only_the_cut_result(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(hostile_config(tmp_path, "max_result_bytes = 4096\n"))
    server.script(
        tool_call("rec__big", '{"bytes": 3000000}'),
        text("Too much.", when="[result cut:"),
    )
    result = kernos("run", "Read it all", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    assert "rec__wide" not in offered_tools(server.requests[0])
    sent = server.tool_results()[0]
    assert "[result cut: 2,995,904 of 3,000,000 bytes dropped;" in sent
    assert len(sent) < 5000
    assert all(len(json.dumps(r)) < 100_000 for r in server.requests)
    with sqlite3.connect(tmp_path / ".kernos" / "kernos.db") as db:
        stored = [row[0] for row in db.execute("SELECT tool_results FROM turns")]
    assert any("[result cut:" in row for row in stored)
    assert max(len(row) for row in stored) < 10_000


# -- schemas -------------------------------------------------------------------------------------


async def test_tools_with_too_big_or_too_deep_schemas_are_left_out_with_one_warning_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with hostile(tmp_path / "calls.jsonl") as toolset:
        names = [s.name for s in await toolset.tools()]
        await toolset.tools()  # listed again: no second warning
    assert "rec__lookup" in names and "rec__big" in names
    assert not {"rec__wide", "rec__enum", "rec__deep"} & set(names)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    wide, enum, deep = lines
    assert wide.startswith("warning: MCP server [rec]: tool 'wide' left out: its input schema is ")
    assert "bytes, over the 65,536-byte limit; the model is not offered it" in wide
    assert "tool 'enum' left out: its input schema is " in enum
    assert "tool 'deep' left out: its input schema nests deeper than 32 levels" in deep


def test_kernos_tools_leaves_them_out_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(hostile_config(tmp_path))
    result = kernos("tools", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "rec__lookup" in result.stdout
    assert "rec__wide" not in result.stdout and "rec__deep" not in result.stdout
    warnings = [line for line in result.stderr.splitlines() if "left out" in line]
    assert len(warnings) == 3, result.stderr


# -- stray stdout --------------------------------------------------------------------------------


def test_stray_stdout_lines_of_a_stdio_server_are_summarised_in_one_warning(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(hostile_config(tmp_path, junk=2_000))
    server.script(
        tool_call("rec__lookup", '{"query": "q"}'),
        text("Found.", when="found 3 entries"),
    )
    result = kernos("run", "Look it up", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "Found.\n"
    noise = [line for line in result.stderr.splitlines() if "junk line" in line]
    assert noise == [
        "warning: MCP server [rec] wrote 2,000 lines that are not MCP messages on stdout; "
        "first: 'junk line 0: not an MCP message'. A stdio server must write only MCP messages "
        "there (logs go to stderr)"
    ], result.stderr[-2000:]
    assert len(result.stderr.splitlines()) < 10, result.stderr[-2000:]
    log = (tmp_path / ".kernos" / "kernos.log").read_text()
    assert "wrote 2,000 lines that are not MCP messages" in log
