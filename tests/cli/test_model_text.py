"""Text from the model is data (docs/architecture.md): it never crashes a run, whatever it contains.

Lone surrogates are cleaned once where model answers enter a session; rich markup in model or user
text is printed as written; pydantic-ai's first-run banner never lands on kernos's terminal.
"""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
from pathlib import Path

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.cli.test_run import kernos
from tests.compress.conftest import MODEL, approving_agent
from tests.conftest import KERNOS

CHANNELS = """
[channels.mail]
kind = "file"
description = "Mail [to the team], as JSON lines."
path = "out/mail.jsonl"
"""


def turns(home: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(home / "kernos.db") as db:
        return list(db.execute("SELECT role, text, tool_calls FROM turns ORDER BY id"))


def test_a_lone_surrogate_from_the_model_is_printed_and_stored_as_u_fffd(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # the server sends valid JSON: "done \ud800 ok" (a lone surrogate escape), in text and args
    server.script(
        tool_call("output_list_channels", {"note": "odd \udfff arg"}),
        text("done \ud800 ok", when="mail"),
    )
    (tmp_path / "kernos.toml").write_text(CHANNELS)
    result = kernos("run", "hi", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert (result.returncode, result.stdout) == (0, "done \ufffd ok\n"), result.stderr
    assert 'output_list_channels {"note": "odd \ufffd arg"}' in result.stderr
    assert "Traceback" not in result.stderr
    stored = turns(tmp_path / ".kernos")
    assert stored[-1][:2] == ("assistant", "done \ufffd ok")
    log = (tmp_path / ".kernos" / "kernos.log").read_text(encoding="utf-8")
    assert "ended" in log


def test_a_lone_surrogate_is_cleaned_before_a_cassette_records_it(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.script(text("rec \ud800 orded"))
    cassette = tmp_path / "run.json"
    result = kernos(
        "run", "hi", "-m", "openai-chat:x", "--record", str(cassette),
        cwd=tmp_path, env=server.env(),
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "rec \ufffd orded\n"), result.stderr
    assert json.loads(cassette.read_text("utf-8"))["turns"][0]["text"] == "rec \ufffd orded"


def test_a_child_answering_with_a_lone_surrogate_completes(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[agents.explore]\ndescription = "Read-only research"\ninstructions = "EXPLORE-AGENT"\n'
    )
    spawn = {"prompt": "TASK: look", "description": "Look", "subagent_type": "explore"}
    server.script(
        tool_call("task", spawn, when="go"),
        text("child saw \ud800 this", when="TASK: look"),
        text("parent done", when="child saw"),
    )
    result = kernos("run", "go", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert (result.returncode, result.stdout) == (0, "parent done\n"), result.stderr
    (spawned,) = server.tool_results()
    assert spawned.startswith("child saw \ufffd this")
    with sqlite3.connect(tmp_path / ".kernos" / "kernos.db") as db:
        rows = list(db.execute("SELECT status, final_text FROM tasks"))
    assert rows == [("completed", "child saw \ufffd this")]
    server.assert_all_consumed()


def test_markup_in_tool_arguments_and_receipts_is_printed_as_written(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(CHANNELS)
    server.script(
        tool_call("output_send__mail", {"payload": "deploy [/] done"}),
        tool_call("output_send__mail", {"payload": ["[b]", "[/b]"], "type": ["text", "markdown"]}),
        text("sent [mail] twice", when="via [mail]"),
    )
    result = kernos("run", "ship it", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert (result.returncode, result.stdout) == (0, "sent [mail] twice\n"), result.stderr
    assert 'main → output_send__mail {"payload": "deploy [/] done"}' in result.stderr
    assert "main ✓ ok" in result.stderr
    assert "main ✓ sent 2 messages via [mail]" in result.stderr
    assert "MarkupError" not in result.stderr


def test_channels_prints_its_hint_and_descriptions_as_written(tmp_path: Path) -> None:
    empty = kernos("channels", cwd=tmp_path)
    assert empty.returncode == 0
    assert "add a [channels.NAME] table to kernos.toml" in empty.stderr
    (tmp_path / "kernos.toml").write_text(CHANNELS)
    listed = kernos("channels", cwd=tmp_path)
    header, mail = listed.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "KIND", "TYPES", "DESCRIPTION"]
    assert mail.endswith("  Mail [to the team], as JSON lines."), mail


def on_a_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run kernos with stdout and stderr on one pseudo-terminal; returns (exit code, screen)."""
    leader, follower = pty.openpty()
    full = {k: v for k, v in os.environ.items() if k not in ("PYTEST_VERSION", "CI")}
    full.update({"TERM": "xterm", "COLUMNS": "100", "KERNOS_HOME": str(cwd / ".kernos"), **env})
    full.pop("NO_COLOR", None)
    full.pop("PYDANTIC_AI_NO_BANNER", None)
    process = subprocess.Popen(
        [KERNOS, *args], cwd=cwd, env=full, stdout=follower, stderr=follower, stdin=follower
    )
    os.close(follower)
    captured = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        captured += chunk
    os.close(leader)
    return process.wait(timeout=60), captured.decode("utf-8", "replace")


def test_no_pydantic_ai_banner_on_a_terminal(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.script(tool_call("output_list_channels", {}), text("the answer"))
    code, screen = on_a_terminal(["run", "hi", "-m", "openai-chat:x"], tmp_path, server.env())
    assert code == 0, screen
    assert "the answer" in screen
    assert "pydantic-ai v" not in screen and "PYDANTIC_AI_NO_BANNER" not in screen
    assert "observability" not in screen


def test_no_pydantic_ai_banner_over_the_compress_progress_bar(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "a.md").write_text("You are a helpful assistant. Please always answer politely.\n")
    server.script(*approving_agent("a.md", "Answer politely."))
    code, screen = on_a_terminal(["compress", "a.md", "-i", "-m", MODEL], tmp_path, server.env())
    assert code == 0, screen
    assert "a.md: approved" in screen
    assert "pydantic-ai v" not in screen and "observability" not in screen


def test_write_stdout_replaces_what_stdout_cannot_encode(tmp_path: Path) -> None:
    # the last line of defence, for text that reached it without passing the runtime boundary
    code = "from kernos.cli._common import write_stdout; write_stdout('a \\ud800 b \\u00e9')"
    python = str(Path(KERNOS).with_name("python"))
    for encoding, expected in (("utf-8", "a \ufffd b \u00e9\n"), ("ascii", "a ? b ?\n")):
        env = {**os.environ, "PYTHONIOENCODING": encoding}
        done = subprocess.run([python, "-c", code], env=env, capture_output=True, timeout=60)
        assert (done.returncode, done.stdout.decode(encoding, "replace")) == (0, expected)
