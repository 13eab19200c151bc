"""A call to a tool the agent does not have shows on stderr like any other failed call,
and the model reads the coded ``unknown_tool`` answer."""

from __future__ import annotations

from pathlib import Path

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.cli.test_run import kernos


def test_an_unknown_tool_is_answered_and_shown_on_stderr(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.script(
        tool_call("read_fil", {"path": "notes.txt"}),
        text("I will use read_file.", when="closest tools you have"),
    )
    result = kernos("run", "go", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert (result.returncode, result.stdout) == (0, "I will use read_file.\n"), result.stderr
    (answered,) = server.tool_results()
    assert "There is no tool `read_fil`. The closest tools you have: `read_file`" in answered
    assert "read_fil" in result.stderr
    assert "✗ unknown_tool There is no tool `read_fil`." in result.stderr
    server.assert_all_consumed()
