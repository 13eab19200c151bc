"""`kernos run`'s activity lines: one line per tool result, the whole result summarized."""

from __future__ import annotations

from pathlib import Path

from kernos.cli.run import one_line
from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.cli.test_run import kernos


def test_one_line_collapses_whitespace_and_cuts_with_an_ellipsis() -> None:
    assert one_line('{\n  "a": 1,\n  "b": 2\n}', 80) == '{ "a": 1, "b": 2 }'
    assert one_line("x" * 50, 10) == "x" * 9 + "…"
    assert one_line("", 10) == ""


def test_a_multi_line_result_is_shown_whole_on_one_line(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("first line\nsecond line\nthird line\n")
    server.script(tool_call("read_file", {"path": "notes.txt"}), text("done"))
    result = kernos("run", "read it", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    shown = [line for line in result.stderr.splitlines() if "✓" in line]
    assert len(shown) == 1, result.stderr
    assert "second line" in shown[0] and "third line" in shown[0], shown


def test_an_error_result_without_a_code_shows_no_none(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[agents.explore]\ndescription = "d"\ntools = ["list_files"]\nmax_turns = 1\n'
    )
    server.script(
        tool_call("task", {"prompt": "TASK: loop", "subagent_type": "explore"}, when="go"),
        text("stopped", when="max_turns"),
        tool_call("list_files", {}, when="TASK:", repeat=True),
    )
    result = kernos("run", "go", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    stopped = [line for line in result.stderr.splitlines() if "budget_exceeded" in line]
    assert stopped, result.stderr
    assert all("None" not in line for line in stopped), result.stderr
