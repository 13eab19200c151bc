"""McpToolset in process: config rules, tool names, selection, results, timeouts, lifecycle."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import psutil
import pytest

from kernos.boundary import call_tool
from kernos.runtime import ConfigError, McpServerConfig, load_config
from kernos.tools import McpServerError, McpServers, McpToolset, mcp_tool_name
from tests._wait import until
from tests.mcp.conftest import RECORDER, recorded


def recorder(record: Path, **options: object) -> McpToolset:
    config = McpServerConfig(
        command=sys.executable,
        args=[str(RECORDER)],
        env={"RECORD_FILE": str(record)},
        **options,  # type: ignore[arg-type]
    )
    return McpToolset("rec", config)


# -- config --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    ["[mcp.x]\nargs = ['a']\n", "[mcp.x]\ncommand = 'a'\nurl = 'http://127.0.0.1:1/mcp'\n"],
)
def test_exactly_one_of_command_or_url(tmp_path: Path, body: str) -> None:
    (tmp_path / "kernos.toml").write_text(body)
    with pytest.raises(ConfigError) as caught:
        load_config(cwd=tmp_path)
    assert "mcp.x: set exactly one of command (a stdio server) or url (Streamable HTTP)" in str(
        caught.value
    )


@pytest.mark.parametrize("name", ["a__b", "has.dot", "_lead"])
def test_server_names_must_make_an_unambiguous_prefix(tmp_path: Path, name: str) -> None:
    (tmp_path / "kernos.toml").write_text(f'[mcp."{name}"]\ncommand = "x"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(cwd=tmp_path)
    assert f"server name '{name}' is not usable as a tool prefix" in str(caught.value)


def test_env_references_are_expanded_in_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCS_TOKEN", "t0k")
    (tmp_path / "kernos.toml").write_text(
        '[mcp.docs]\nurl = "http://127.0.0.1:1/mcp"\n'
        'headers = { Authorization = "Bearer ${DOCS_TOKEN}" }\ntimeout = 5\n'
    )
    server = load_config(cwd=tmp_path).mcp["docs"]
    assert (server.headers, server.timeout) == ({"Authorization": "Bearer t0k"}, 5)


# -- names ---------------------------------------------------------------------------------------


def test_tool_names_are_sanitized_for_providers() -> None:
    assert mcp_tool_name("git", "git_log") == "git__git_log"
    assert mcp_tool_name("fs", "read.file/v2") == "fs__read_file_v2"
    assert mcp_tool_name("x", "") == "x___"
    assert len(mcp_tool_name("srv", "t" * 100)) == 64


async def test_two_tools_with_one_offered_name_are_a_config_error_naming_both(
    tmp_path: Path,
) -> None:
    toolset = recorder(tmp_path / "calls.jsonl")
    async with toolset:
        await toolset.tools()
        toolset._listed = [
            *toolset._listed,
            toolset._listed[0].model_copy(update={"name": "look.up"}),
        ]
        toolset._listed[0] = toolset._listed[0].model_copy(update={"name": "look_up"})
        with pytest.raises(McpServerError) as caught:
            toolset._build_specs()
    assert "tools 'look_up' and 'look.up' would both be offered as 'rec__look_up'" in str(
        caught.value
    )


async def test_include_and_exclude_select_by_the_servers_own_names(tmp_path: Path) -> None:
    async with recorder(tmp_path / "a.jsonl", include=["lookup", "s*"], exclude=["slow"]) as ts:
        assert [spec.name for spec in await ts.tools()] == ["rec__lookup"]


# -- calls ---------------------------------------------------------------------------------------


async def test_results_keep_structured_content_in_details(tmp_path: Path) -> None:
    record = tmp_path / "calls.jsonl"
    async with recorder(record) as toolset:
        spec = {s.name: s for s in await toolset.tools()}["rec__lookup"]
        result = await call_tool(spec, {"query": "q", "limit": "2", "tags": []})
    assert (result.is_error, result.text) == (False, "found 3 entries for 'q'")
    assert result.details["structured"] == {"count": 3, "arguments": {"query": "q", "limit": 2}}
    assert recorded(record) == [{"tool": "lookup", "arguments": {"query": "q", "limit": 2}}]


async def test_a_call_past_the_timeout_is_a_coded_error(tmp_path: Path) -> None:
    async with recorder(tmp_path / "calls.jsonl", timeout=30) as toolset:
        spec = {s.name: s for s in await toolset.tools()}["rec__slow"]
        toolset.config = toolset.config.model_copy(update={"timeout": 0.2})
        result = await call_tool(spec, {"seconds": 60})
    assert result.is_error
    assert result.code == "mcp_timeout"
    assert "got no answer from MCP server [rec] within 0.2 s" in result.text


async def test_an_is_error_result_is_a_tool_error(tmp_path: Path) -> None:
    async with recorder(tmp_path / "calls.jsonl") as toolset:
        spec = {s.name: s for s in await toolset.tools()}["rec__fail"]
        result = await call_tool(spec, {})
    assert (result.is_error, result.code, result.text) == (
        True,
        "mcp_error",
        "the index is offline",
    )


async def test_a_call_after_stop_says_the_server_is_not_running(tmp_path: Path) -> None:
    toolset = recorder(tmp_path / "calls.jsonl")
    async with toolset:
        spec = (await toolset.tools())[0]
    result = await call_tool(spec, {"query": "q"})
    assert result.code == "mcp_unavailable"
    assert "MCP server [rec] is not running" in result.text


# -- lifecycle -----------------------------------------------------------------------------------


def _server_children() -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if str(RECORDER) in " ".join(p.cmdline())
    ]


async def test_one_server_process_per_toolset_however_often_tools_are_listed(
    tmp_path: Path,
) -> None:
    toolset = recorder(tmp_path / "calls.jsonl")
    assert _server_children() == []  # lazy: nothing runs before the first use
    async with toolset:
        first = await toolset.tools()
        again = await toolset.tools()
        assert [s.name for s in first] == [s.name for s in again]
        assert first[0] is again[0]  # the same specs: parent and children share one session
        children = _server_children()
        assert len(children) == 1
    _, alive = psutil.wait_procs(children, timeout=60)
    assert alive == []


async def test_servers_start_together_and_one_failure_is_reported(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        f"[mcp.rec]\ncommand = {sys.executable!r}\nargs = [{str(RECORDER)!r}]\n"
        f"env = {{ RECORD_FILE = {str(tmp_path / 'c.jsonl')!r} }}\n"
        "[mcp.missing]\ncommand = 'no-such-mcp-server-here'\n"
    )
    servers = McpServers(load_config(cwd=tmp_path))
    with pytest.raises(McpServerError) as caught:
        await servers.tools()
    await servers.aclose()
    assert "mcp.missing: the server did not start (FileNotFoundError" in str(caught.value)
    assert _server_children() == []


async def test_stop_during_a_start_does_not_wait_out_the_start_timeout() -> None:
    hang = "import sys, time; sys.stdin.read(); time.sleep(600)"  # never answers initialize
    toolset = McpToolset(
        "hang", McpServerConfig(command=sys.executable, args=["-c", hang], timeout=600)
    )
    listing = asyncio.ensure_future(toolset.tools())
    started = lambda: [p for p in psutil.Process().children() if hang in " ".join(p.cmdline())]  # noqa: E731
    children = await until(started, "the server process to start")
    await toolset.stop()  # with a 600 s start timeout, only a cancelled start returns in time
    with pytest.raises(McpServerError, match="did not start"):
        await listing
    _, alive = psutil.wait_procs(children, timeout=60)
    assert alive == []
