"""`kernos run` as a user runs it, a real process against the local server."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests import _cli


def kernos(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("KERNOS_MODEL", "OPENAI_API_KEY")}
    full_env = {**base, "KERNOS_HOME": str(cwd / ".kernos"), **(env or {})}
    return _cli.kernos(*args, cwd=cwd, env=full_env, timeout=timeout)


def test_final_answer_alone_on_stdout(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.script(text("Hello from the local server."))
    result = kernos("run", "hello", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello from the local server.\n"
    assert server.requests[0]["model"] == "x"
    assert server.requests[0]["messages"][-1] == {"role": "user", "content": "hello"}


def test_no_model_is_exit_2_with_the_how_to_line(tmp_path: Path) -> None:
    result = kernos("run", "hello", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert (
        "no model configured: pass --model, set KERNOS_MODEL, or set default_model in kernos.toml"
        in result.stderr
    )


def test_model_from_config_and_env(server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text('default_model = "openai-chat:from-config"\n')
    server.script(text("a"), text("b"))
    assert kernos("run", "hi", cwd=tmp_path, env=server.env()).stdout == "a\n"
    env = {**server.env(), "KERNOS_MODEL": "openai-chat:from-env"}
    assert kernos("run", "hi", cwd=tmp_path, env=env).stdout == "b\n"
    assert [r["model"] for r in server.requests] == ["from-config", "from-env"]


def test_bad_config_is_exit_2_naming_file_and_key(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text("[agents.main]\nmodle = 'x'\n")
    result = kernos("run", "hi", "-m", "openai-chat:x", cwd=tmp_path)
    assert result.returncode == 2
    assert "kernos.toml: agents.main.modle: unknown key" in result.stderr


def test_provider_failure_is_exit_1(server: FakeOpenAIServer, tmp_path: Path) -> None:
    # nothing scripted: the server answers 500 naming the request
    env = {**server.env(), "OPENAI_MAX_RETRIES": "0"}
    result = kernos("run", "hello", "-m", "openai-chat:x", cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert "the run failed" in result.stderr
    assert result.stdout == ""


def test_record_then_replay_offline(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.script(text("recorded"))
    cassette = tmp_path / "run.json"
    first = kernos(
        "run",
        "hi",
        "-m",
        "openai-chat:x",
        "--record",
        str(cassette),
        cwd=tmp_path,
        env=server.env(),
    )
    assert first.returncode == 0, first.stderr
    assert "test-key" not in cassette.read_text()
    assert json.loads(cassette.read_text())["turns"][0]["text"] == "recorded"
    replay = kernos("run", "hi", "-m", f"replay:{cassette}", cwd=tmp_path)
    assert (replay.returncode, replay.stdout) == (0, "recorded\n")


def test_help_and_version(tmp_path: Path) -> None:
    assert "Run an agent on PROMPT" in kernos("run", "--help", cwd=tmp_path).stdout
    assert kernos("--version", cwd=tmp_path).stdout.startswith("kernos ")


def test_errors_keep_bracketed_text(tmp_path: Path) -> None:
    # rich markup must not swallow "[agents.x]" in an error message
    result = kernos("run", "hi", "-m", "openai-chat:x", "--agent", "ghost", cwd=tmp_path)
    assert result.returncode == 2
    assert "define [agents.ghost]" in result.stderr


S1 = (
    '{"prompt":"TASK: Audit the task tool boundary.","description":"Audit task tool",'
    '"category":"","subagent_type":"explore","run_in_background":false,'
    '"name":"task-padding-audit","model":"","load_skills":[],"tasks":[{"prompt":"unused",'
    '"description":"unused","category":"quick","subagent_type":"","name":"unused","model":"",'
    '"load_skills":[]}]}'
)


def test_padded_and_malformed_tool_calls_through_kernos_run(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[agents.explore]\ndescription = "Read-only research"\n'
        '[categories.quick]\ndescription = "Small, fast edits"\n'
    )
    server.script(
        tool_call("task", '{"prompt": "TASK: x", "subagent_type": '),  # malformed JSON
        tool_call("task", S1, when="not valid JSON"),  # GPT-style padding, raw string
        text("child found nothing odd", when="TASK: Audit the task tool boundary."),
        text("Audit complete.", when="child found nothing odd"),
    )
    result = kernos("run", "audit", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Audit complete.\n"
    malformed, spawned = server.tool_results()
    # the model reads the boundary's coded text, not pydantic-ai's parser error
    assert "The arguments for tool `task` are not valid JSON (Expecting value at position 39)" in (
        malformed
    )
    assert "Invalid JSON" not in malformed
    assert spawned.startswith("child found nothing odd\n\n[task_id: t_")
    assert "Provide EITHER prompt OR tasks" not in "".join(server.tool_results())
    server.assert_all_consumed()


def test_runs_are_logged_under_the_kernos_home(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.script(text("fine"))
    assert (
        kernos("run", "hi", "-m", "openai-chat:x", cwd=tmp_path, env=server.env()).returncode == 0
    )
    env = {**server.env(), "OPENAI_MAX_RETRIES": "0"}
    assert kernos("run", "hi", "-m", "openai-chat:x", cwd=tmp_path, env=env).returncode == 1
    log = (tmp_path / ".kernos" / "kernos.log").read_text()
    assert re.search(r"INFO kernos\.run: run s_[0-9a-f]{8}: agent main on x\n", log)
    assert re.search(r"INFO kernos\.run: run s_[0-9a-f]{8} ended\n", log)
    assert re.search(r"WARNING kernos\.run: run s_[0-9a-f]{8} failed: Model\w*Error", log)
    assert "test-key" not in log


def test_prompt_from_stdin_and_empty_prompt(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.script(text("read it"))
    base = {k: v for k, v in os.environ.items() if k != "KERNOS_MODEL"}
    env = {**base, **server.env(), "KERNOS_HOME": str(tmp_path / ".kernos")}
    piped = _cli.kernos(
        "run",
        "-",
        "-m",
        "openai-chat:x",
        cwd=tmp_path,
        env=env,
        input="summarise this\nplease",
        timeout=60,
    )
    assert (piped.returncode, piped.stdout) == (0, "read it\n")
    assert server.requests[0]["messages"][-1]["content"] == "summarise this\nplease"
    empty = kernos("run", "  ", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert empty.returncode == 2 and "PROMPT is empty" in empty.stderr


def test_truncated_tool_arguments_reach_the_model_as_the_boundarys_invalid_json_text(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.script(
        tool_call("task", '{"prompt": '),
        text("I will resend it.", when="not valid JSON"),
    )
    result = kernos("run", "go", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert (result.returncode, result.stdout) == (0, "I will resend it.\n"), result.stderr
    (answered,) = server.tool_results()
    assert (
        "The arguments for tool `task` are not valid JSON (Expecting value at position 11). "
        "Send one JSON object with the tool's fields." in answered
    )
    assert "✗ invalid_json The arguments for tool `task` are not valid JSON" in result.stderr
    server.assert_all_consumed()


def test_arguments_nested_10000_deep_are_answered_not_crashed(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.script(
        tool_call("task", '{"prompt": ' + "[" * 10_000 + "]" * 10_000 + "}"),
        text("flattened", when="more than 100 levels deep"),
    )
    result = kernos("run", "go", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert (result.returncode, result.stdout) == (0, "flattened\n"), result.stderr[-2000:]
    (answered,) = server.tool_results()
    assert "The arguments for tool `task` nest lists or objects more than 100 levels deep" in (
        answered
    )


def test_the_same_read_repeated_gets_a_repeated_call_note_shown_on_stderr(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n")
    (tmp_path / "kernos.toml").write_text("[tasks]\nrepeat_limit = 2\n")
    read = tool_call("read_file", {"path": "notes.txt"}, when="alpha")
    server.script(tool_call("read_file", {"path": "notes.txt"}), read, text("ok", when="2 times"))
    result = kernos("run", "read it", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr
    first, second = server.tool_results()
    assert "[repeated_call]" not in first
    assert second.startswith(
        "[repeated_call] You called `read_file` with these same arguments 2 times in a row"
    )
    assert "✓ [repeated_call] You called `read_file` with these same arguments 2" in result.stderr


def test_a_call_cut_off_at_the_output_limit_through_kernos_run(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.script(
        tool_call("read_file", '{"path": "no', finish_reason="length"),
        text("I will split it.", when="was cut off"),
    )
    result = kernos("run", "go", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert (result.returncode, result.stdout) == (0, "I will split it.\n"), result.stderr
    assert "✗ truncated_call Your call of `read_file` was cut off" in result.stderr
    assert "not valid JSON" not in server.tool_results()[0]
