"""MCP servers no one here wrote, driven through `kernos run` as a user runs it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.conftest import KERNOS
from tests.mcp.conftest import (
    BIN,
    DOCS_TOKEN,
    RECORDER,
    DocsServer,
    child_looks_up,
    kernos,
    kernos_env,
    offered_tools,
    recorded,
    recorder_config,
    recording_pids,
    toml_str,
    tool_data,
)

TIME_CONFIG = (
    "[mcp.time]\n"
    f"command = {toml_str(BIN / 'mcp-server-time')}\n"
    'args = ["--local-timezone", "Etc/UTC"]\n'
)


def test_time_server_tools_listed_and_a_padded_call_answered(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(TIME_CONFIG)
    server.script(
        # GPT-style: an extra blank field next to the real one
        tool_call("time__get_current_time", '{"timezone": "Europe/Oslo", "format": ""}'),
        text("It is night in Oslo.", when='"day_of_week"'),
    )
    result = kernos(
        "run", "What time is it in Oslo?", "-m", "openai-chat:x", cwd=tmp_path, env=server.env()
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "It is night in Oslo.\n"
    offered = offered_tools(server.requests[0])
    assert {"time__get_current_time", "time__convert_time"} <= set(offered)
    source, answer_text = tool_data(server.tool_results()[0])
    assert source == "mcp:time"
    answer = json.loads(answer_text)
    assert answer["timezone"] == "Europe/Oslo"
    assert {"datetime", "day_of_week", "is_dst"} <= set(answer)


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=Kernos Test", "-c", "user.email=test@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def test_git_server_answers_about_a_real_repository(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "CHANGES.md").write_text("# Changes\n")
    git(repo, "add", "CHANGES.md")
    git(repo, "commit", "-q", "-m", "First entry of the changelog")
    (tmp_path / "kernos.toml").write_text(
        "[mcp.git]\n"
        f"command = {toml_str(BIN / 'mcp-server-git')}\n"
        f"args = ['--repository', {toml_str(repo)}]\n"
        'include = ["git_log", "git_status"]\n'
    )
    padded = {
        "repo_path": str(repo),
        "max_count": "5",
        "start_timestamp": "",
        "end_timestamp": None,
    }
    server.script(
        tool_call("git__git_log", json.dumps(padded)),
        text("One commit.", when="First entry of the changelog"),
    )
    result = kernos(
        "run", "Summarise the history", "-m", "openai-chat:x", cwd=tmp_path, env=server.env()
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "One commit.\n"
    git_tools = [n for n in offered_tools(server.requests[0]) if n.startswith("git__")]
    assert sorted(git_tools) == ["git__git_log", "git__git_status"]  # include = [...] applied
    assert "First entry of the changelog" in server.tool_results()[0]


def test_streamable_http_server_with_a_bearer_token_from_the_environment(
    server: FakeOpenAIServer, docs_server: DocsServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        "[mcp.docs]\n"
        f"url = {toml_str(docs_server.url)}\n"
        'headers = { Authorization = "Bearer ${DOCS_TOKEN}" }\n'
    )
    server.script(
        tool_call("docs__search", '{"query": "padding", "limit": "2"}'),
        text("Two pages.", when="2 pages mention"),
    )
    env = {**server.env(), "DOCS_TOKEN": DOCS_TOKEN}
    result = kernos("run", "Find padding docs", "-m", "openai-chat:x", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Two pages.\n"
    assert "docs__search" in offered_tools(server.requests[0])
    assert [tool_data(r) for r in server.tool_results()] == [
        ("mcp:docs", "docs: 2 pages mention 'padding' (limit 2)")
    ]
    assert set(docs_server.guard.seen) == {f"Bearer {DOCS_TOKEN}"}


def test_a_wrong_token_is_one_clear_line_and_exit_2(
    server: FakeOpenAIServer, docs_server: DocsServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        "[mcp.docs]\n"
        f"url = {toml_str(docs_server.url)}\n"
        'headers = { Authorization = "Bearer ${DOCS_TOKEN}" }\n'
    )
    env = {**server.env(), "DOCS_TOKEN": "not-the-token-9x"}
    result = kernos("run", "Find padding docs", "-m", "openai-chat:x", cwd=tmp_path, env=env)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "mcp.docs: the server did not start" in lines[0]
    assert "401" in lines[0]
    assert "not-the-token-9x" not in lines[0]
    assert server.requests == []  # no model turn is spent on a run that cannot work


GPT_PADDED = {
    "query": "boundary",
    "limit": "",
    "exact": "false",
    "tags": [],
    "mode": "null",
    "since": "none",
    "note": "   ",
    "filters": {},
    "unused": "",
}


def test_recording_server_receives_a_padded_call_stripped_and_a_bad_call_never(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    record = tmp_path / "calls.jsonl"
    (tmp_path / "kernos.toml").write_text(recorder_config("rec", record))
    server.script(
        tool_call("rec__lookup", json.dumps(GPT_PADDED)),
        tool_call("rec__lookup", '{"limit": 3, "mode": "fast"}', when="found 3 entries"),
        text("done", when="required field is missing"),
    )
    result = kernos("run", "Look it up", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    assert recorded(record) == [  # whitespace-only text is a value, not padding
        {"tool": "lookup", "arguments": {"query": "boundary", "exact": False, "note": "   "}}
    ]
    retry = server.requests[2]["messages"][-1]["content"]
    assert "Invalid arguments for tool `rec__lookup`:" in retry
    assert "- `query`: required field is missing; add it." in retry


def test_recording_server_receives_a_stringified_call_as_the_clean_call(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    record = tmp_path / "calls.jsonl"
    (tmp_path / "kernos.toml").write_text(recorder_config("rec", record))
    stringified = {
        "query": "[draft]",  # a string property: JSON-looking text stays text
        "limit": "2",
        "exact": "TRUE",
        "tags": '["a", "b"]',
        "filters": '{"field": "lang", "value": ""}',
        "note": "",
    }
    server.script(
        tool_call("rec__lookup", json.dumps(stringified)),
        text("done", when="found 3 entries"),
    )
    result = kernos("run", "Look it up", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    assert recorded(record) == [
        {
            "tool": "lookup",
            "arguments": {
                "query": "[draft]",
                "limit": 2,
                "exact": True,
                "tags": ["a", "b"],
                "filters": {"field": "lang"},
            },
        }
    ]
    assert len(server.requests) == 2  # no retry round trip


def test_parent_and_child_share_one_server_process(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    record = tmp_path / "calls.jsonl"
    server.script(
        *child_looks_up(tmp_path, record),
        tool_call("rec__lookup", '{"query": "from parent", "mode": ""}', when="child done"),
        text("all done", when="for 'from parent'"),
    )
    result = kernos("run", "Look twice", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    assert result.stdout == "all done\n"
    assert recorded(record) == [
        {"tool": "lookup", "arguments": {"query": "from child"}},
        {"tool": "lookup", "arguments": {"query": "from parent"}},
    ]
    assert len(recording_pids(record)) == 1


def test_server_errors_are_tool_errors_with_a_code(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    record = tmp_path / "calls.jsonl"
    (tmp_path / "kernos.toml").write_text(recorder_config("rec", record))
    server.script(tool_call("rec__fail", "{}"), text("noted", when="the index is offline"))
    result = kernos("run", "Try it", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    assert "✗ mcp_error the index is offline" in result.stderr


def test_a_server_that_does_not_start_names_itself_and_its_stderr(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    script = "import sys; print('fatal: no such repository', file=sys.stderr); sys.exit(3)"
    (tmp_path / "kernos.toml").write_text(
        f"[mcp.broken]\ncommand = {toml_str(sys.executable)}\nargs = ['-c', {toml_str(script)}]\n"
    )
    result = kernos("run", "hi", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "mcp.broken: the server did not start" in lines[0]
    assert "fatal: no such repository" in lines[0]


# -- no server process outlives kernos --------------------------------------------------------


def _start_held_run(
    server: FakeOpenAIServer, tmp_path: Path, release: threading.Event
) -> tuple[subprocess.Popen[str], list[psutil.Process]]:
    """Start `kernos run` with two stdio servers; return once its first model request is held."""
    (tmp_path / "kernos.toml").write_text(
        TIME_CONFIG + recorder_config("rec", tmp_path / "calls.jsonl")
    )
    server.script(text("finished", hold=release))
    process = subprocess.Popen(
        [KERNOS, "run", "hi", "-m", "openai-chat:x"],
        cwd=tmp_path,
        env=kernos_env(tmp_path, server.env()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for _ in range(1200):  # the first model request comes after every server has started
        if server.requests or process.poll() is not None:
            break
        threading.Event().wait(0.1)
    assert server.requests, process.communicate(timeout=30)
    children = psutil.Process(process.pid).children(recursive=True)
    commands = [" ".join(child.cmdline()) for child in children]
    assert any("mcp-server-time" in c for c in commands), commands
    assert any(str(RECORDER) in c for c in commands), commands
    return process, children


def _assert_all_gone(children: list[psutil.Process]) -> None:
    _, alive = psutil.wait_procs(children, timeout=60)
    assert alive == [], [p.cmdline() for p in alive]


def test_no_server_process_is_left_after_a_normal_exit(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    release = threading.Event()
    process, children = _start_held_run(server, tmp_path, release)
    release.set()
    out, err = process.communicate(timeout=120)
    assert (process.returncode, out) == (0, "finished\n"), err
    _assert_all_gone(children)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_no_server_process_is_left_when_kernos_is_signalled_mid_run(
    server: FakeOpenAIServer, tmp_path: Path, sig: signal.Signals
) -> None:
    release = threading.Event()
    process, children = _start_held_run(server, tmp_path, release)
    try:
        process.send_signal(sig)
        process.communicate(timeout=120)
        _assert_all_gone(children)
    finally:
        release.set()
        if process.poll() is None:
            process.kill()


def test_kernos_tools_lists_each_servers_tools_with_its_source(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(TIME_CONFIG)
    done = kernos("tools", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)["tools"]}
    assert rows["time__get_current_time"]["source"] == "mcp:time"
    assert "read_file" in rows  # the built-ins are still listed beside them
