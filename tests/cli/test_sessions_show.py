"""`kernos sessions show ID [--json]`: a session's transcript as `kernos tasks output` shows a
child's (turns, tool calls and results), then the tasks it spawned; model text shown as written."""

from __future__ import annotations

import json
from pathlib import Path

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.cli.test_run import kernos


def test_show_prints_the_transcript_and_children(server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text('[agents.explore]\ndescription = "Read-only"\n')
    (tmp_path / "notes.txt").write_text("alpha\n")
    server.script(
        tool_call("read_file", {"path": "notes.txt"}),
        tool_call("task", {"prompt": "TASK: count", "subagent_type": "explore"}, when="alpha"),
        text("child says 3", when="TASK: count"),
        text("[bold]Done[/bold]: 3.", when="child says 3"),
    )
    run = kernos("run", "read it", "-m", "openai-chat:x", "--json", cwd=tmp_path, env=server.env())
    assert run.returncode == 0, run.stderr
    session_id = json.loads(run.stdout)["session_id"]
    (task_id,) = [c["id"] for c in json.loads(run.stdout)["children"]]

    shown = kernos("sessions", "show", session_id, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "[user] read it"
    assert lines[1] == '[tool_call] read_file {"path": "notes.txt"}'
    assert lines[2].startswith("[tool_result] read_file: ") and "alpha" in shown.stdout
    assert any(line.startswith('[tool_call] task {"prompt": "TASK: count"') for line in lines)
    assert "[assistant] [bold]Done[/bold]: 3." in lines  # markup is data, not style
    assert lines[-1].startswith(f"[task] {task_id} completed agent:explore")

    document = json.loads(kernos("sessions", "show", session_id, "--json", cwd=tmp_path).stdout)
    assert document["session"]["id"] == session_id
    assert [e["type"] for e in document["events"]][:3] == ["message", "tool_call", "tool_result"]
    assert document["events"][0]["text"] == "[user] read it"
    assert [c["id"] for c in document["children"]] == [task_id]
    # the listing still works beside `show`
    listed = json.loads(kernos("sessions", "--json", cwd=tmp_path).stdout)["sessions"]
    assert [s["id"] for s in listed] == [session_id]
    assert session_id in kernos("sessions", cwd=tmp_path).stdout


def test_an_unknown_session_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = kernos("sessions", "show", "s_nothere", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert "no session s_nothere" in line and "`kernos sessions`" in line
