"""Claude Code agent files: found in ``.claude/agents/`` after
``.kernos/agents/``, their tool names mapped, ``model: sonnet`` resolved through
``[models.sonnet]`` or reported, all of one file's problems in one ``config check`` message."""

from __future__ import annotations

import json
from pathlib import Path

from kernos.testing import FakeOpenAIServer, text
from tests.cli.test_config_check import kernos


def claude_agent(project: Path, name: str, front: str, body: str = "Look.") -> Path:
    path = project / ".claude" / "agents" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nname: {name}\n{front}---\n{body}\n", encoding="utf-8")
    return path


#: sources of tools an agent gets only where spawning is allowed or a team forms
CONDITIONAL = ("tasks", "teams")


def tool_names(project: Path, agent: str) -> list[str]:
    done = kernos("tools", "--agent", agent, "--json", cwd=project)
    assert done.returncode == 0, done.stderr
    # the task and team tools are listed too, with their source: these tests are of the rest
    rows = json.loads(done.stdout)["tools"]
    return [row["name"] for row in rows if row["source"] not in CONDITIONAL]


def test_a_claude_code_agent_file_is_found_with_its_tools_mapped(tmp_path: Path) -> None:
    claude_agent(tmp_path, "reviewer", "description: Reviews code\ntools: Read, Grep, Glob, LS\n")
    assert tool_names(tmp_path, "reviewer") == ["read_file", "search_files", "list_files"]
    done = kernos("config", "check", cwd=tmp_path)
    assert done.returncode == 0, done.stdout


def test_kernos_definitions_win_over_claude_code_files(tmp_path: Path) -> None:
    claude_agent(tmp_path, "reviewer", "tools: Grep\n")
    claude_agent(tmp_path, "planner", "tools: Glob\n")
    own = tmp_path / ".kernos" / "agents" / "reviewer.md"
    own.parent.mkdir(parents=True)
    own.write_text("---\ntools: read_file\n---\nOurs.\n", encoding="utf-8")
    (tmp_path / "kernos.toml").write_text('[agents.planner]\ntools = ["search_files"]\n')
    assert tool_names(tmp_path, "reviewer") == ["read_file"]
    assert tool_names(tmp_path, "planner") == ["search_files"]
    done = kernos("config", "check", cwd=tmp_path)
    assert done.returncode == 0, done.stdout  # shadowing another tool's agent is no problem


def test_one_message_names_the_unmappable_tool_and_the_undefined_model(tmp_path: Path) -> None:
    path = claude_agent(tmp_path, "reviewer", "tools: Read, Grep, Bash\nmodel: sonnet\n")
    done = kernos("config", "check", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "1 problem found\n"
    [line] = done.stdout.splitlines()
    assert line.startswith(f"{path}: agents.reviewer: model: 'sonnet' is a Claude Code model name")
    assert "define [models.sonnet]" in line
    assert "tools: 'Bash' matches no tool" in line
    assert "kernos has no shell tool" in line
    assert "'Read'" not in line and "'Grep'" not in line  # mapped
    document = json.loads(kernos("config", "check", "--json", cwd=tmp_path).stdout)
    assert [p["key"] for p in document["problems"]] == ["agents.reviewer"]


def test_an_unmappable_tool_stops_other_commands_with_what_to_use(tmp_path: Path) -> None:
    claude_agent(tmp_path, "writer", "tools: Read, NotebookEdit, Task, WebFetch\n")
    done = kernos("tools", "--agent", "writer", cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert "agents.writer.tools: 'NotebookEdit', 'WebFetch' match no tool" in line  # Task: task
    assert "edit text files, not notebooks" in line
    assert "kernos fetches no URLs itself" in line


def test_a_model_alias_is_resolved_through_the_models_table(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    claude_agent(tmp_path, "reviewer", "model: sonnet\n")
    (tmp_path / "kernos.toml").write_text(
        f'[models.sonnet]\nmodel = "openai-chat:local-sonnet"\nbase_url = "{server.base_url}"\n'
        'api_key_env = "OPENAI_API_KEY"\n'
    )
    server.script(text("reviewed"))
    done = kernos("run", "hi", "-a", "reviewer", cwd=tmp_path, env=server.env())
    assert (done.returncode, done.stdout) == (0, "reviewed\n"), done.stderr
    assert [r["model"] for r in server.requests] == ["local-sonnet"]


def test_model_option_wins_without_resolving_the_files_model(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    claude_agent(tmp_path, "reviewer", "tools: Read\nmodel: opus\n")
    without = kernos("run", "hi", "-a", "reviewer", cwd=tmp_path, env=server.env())
    assert without.returncode == 2
    [line] = without.stderr.splitlines()
    assert "agents.reviewer.model: 'opus' is a Claude Code model name" in line
    assert "define [models.opus]" in line
    assert server.requests == []
    server.script(text("reviewed"))
    done = kernos("run", "hi", "-a", "reviewer", "-m", "openai-chat:x", cwd=tmp_path,
                  env=server.env())  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "reviewed\n"), done.stderr
