"""Permission rules (``[permissions]``, ``[agents.NAME.permissions]``): the pure precedence, and
what a user sees of it — a denied tool never offered, an asked call refused where nobody can
answer, a misspelt rule a config error, each tool's rule in ``kernos tools`` / ``config check``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernos.runtime import PermissionTable, decide, parse_entry
from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.cli.test_run import kernos


def table(where: str = "permissions", **lists: object) -> PermissionTable:
    default = lists.pop("default", None)
    parsed = {k: tuple(parse_entry(e) for e in v) for k, v in lists.items()}  # type: ignore[attr-defined]
    return PermissionTable(where, default=default, **parsed)  # type: ignore[arg-type]


def test_deny_beats_ask_beats_allow_within_a_table() -> None:
    rules = [table(allow=["git__*"], ask=["git__*"], deny=["git__git_push"])]
    assert decide(rules, "git__git_push").rule == "deny"
    assert decide(rules, "git__git_status").rule == "ask"
    assert decide([table(allow=["x"], ask=["x"])], "x").rule == "ask"
    assert decide([table(allow=["x"])], "x").rule == "allow"


def test_the_most_specific_table_wins() -> None:
    agent = table("agents.docs.permissions", allow=["git__git_push"])
    common = table(deny=["git__*"])
    decision = decide([agent, common], "git__git_push")
    assert decision.rule == "allow"
    assert decision.why == "agents.docs.permissions.allow 'git__git_push'"
    assert decide([agent, common], "git__git_log").rule == "deny"


def test_a_list_then_the_tools_own_default_then_default() -> None:
    assert decide([table(default="deny")], "write_file", own="ask").rule == "ask"
    assert decide([table(allow=["write_file"])], "write_file", own="ask").rule == "allow"
    assert decide([table(default="deny")], "read_file").rule == "deny"
    assert decide([table()], "read_file").rule == "allow"
    agent = table("agents.a.permissions", default="ask")
    assert decide([agent, table(default="deny")], "x").why == "agents.a.permissions.default"


def test_a_path_glob_rules_only_the_calls_on_matching_paths() -> None:
    rules = [table(allow=["write_file(docs/**)"], deny=["write_file(src/**)"])]
    assert decide(rules, "write_file", "docs/a/b.md", own="ask").rule == "allow"
    assert decide(rules, "write_file", "./docs/x.md", own="ask").rule == "allow"
    assert decide(rules, "write_file", "docs/../src/x.py", own="ask").rule == "deny"
    assert decide(rules, "write_file", "README.md", own="ask").rule == "ask"
    assert decide(rules, "write_file", None, own="ask").rule == "ask"


@pytest.mark.parametrize("bad", ["write_file(", "write_file()", "a b", "(docs/**)", ""])
def test_a_malformed_entry_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a permission rule"):
        parse_entry(bad)


def offered(request: dict[str, object]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}  # type: ignore[attr-defined, index]


def test_a_denied_tool_is_not_offered_and_an_agents_table_wins(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[permissions]\ndeny = ["search_files", "list_*"]\n'
        '[agents.main.permissions]\nallow = ["list_files"]\n'
    )
    server.script(text("ok"))
    result = kernos("run", "hi", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    tools = offered(server.requests[0])
    assert "search_files" not in tools
    assert {"read_file", "list_files", "task"} <= tools


def test_an_asked_call_nobody_can_answer_is_refused_at_once(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # ask with nobody to answer (not a terminal, no --approve): refused at once, coded
    (tmp_path / "notes.md").write_text("hello\n")
    (tmp_path / "kernos.toml").write_text('[permissions]\nask = ["read_file"]\n')
    server.script(
        tool_call("read_file", {"path": "notes.md"}, when="read it"),
        text("could not", when="nobody can be asked"),
    )
    result = kernos("run", "read it", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    (refused,) = server.tool_results()
    assert refused.startswith("read_file needs a person's approval and nobody can be asked")
    assert "--approve read_file" in refused and "--yes" in refused
    assert "hello" not in refused


def test_a_rule_that_matches_no_tool_is_a_config_error(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[permissions]\ndeny = ["read_fiel"]\n[agents.main.permissions]\nask = ["git__*"]\n'
    )
    run = kernos("run", "hi", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert run.returncode == 2
    assert "permissions.deny: 'read_fiel' matches no tool" in run.stderr
    assert server.requests == []
    check = kernos("config", "check", cwd=tmp_path)
    assert check.returncode == 2
    lines = check.stdout.splitlines()
    assert any("permissions.deny: 'read_fiel' matches no tool" in line for line in lines)
    assert any("agents.main.permissions.ask: 'git__*' matches no tool" in line for line in lines)


def test_a_malformed_rule_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text('[permissions]\nask = ["write_file("]\n')
    done = kernos("tools", cwd=tmp_path)
    assert done.returncode == 2
    assert "permissions.ask: 'write_file(' is not a permission rule" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_tools_and_config_check_show_each_tools_rule(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[permissions]\nask = ["read_file"]\ndeny = ["search_files"]\n'
    )
    listed = kernos("tools", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rules = {t["name"]: t["rule"] for t in json.loads(listed.stdout)["tools"]}
    assert rules["read_file"] == "ask" and rules["search_files"] == "deny"
    assert rules["list_files"] == "allow"
    table_text = kernos("tools", cwd=tmp_path).stdout
    assert table_text.splitlines()[0].split() == ["NAME", "SOURCE", "RULE", "DESCRIPTION"]
    check = kernos("config", "check", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert "rules for main: allow list_files" in check.stderr
    assert "ask read_file" in check.stderr and "deny search_files" in check.stderr
    document = json.loads(kernos("config", "check", "--json", cwd=tmp_path).stdout)
    assert document["rules"]["main"]["read_file"] == "ask"


def test_the_task_and_team_tools_are_shown_with_their_rule(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[permissions]\nask = ["task_send"]\n\n[agents.explore]\ndescription = "d"\n'
        'instructions = "i"\n\n[agents.explore.permissions]\ndeny = ["task"]\n'
    )
    for agent, spawn in (("main", "allow"), ("explore", "deny")):
        listed = kernos("tools", "--json", "--agent", agent, cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        tools = {t["name"]: (t["source"], t["rule"]) for t in json.loads(listed.stdout)["tools"]}
        assert tools["task"] == ("tasks", spawn)
        assert tools["task_output"] == ("tasks", "allow")
        assert tools["task_send"] == ("tasks", "ask")
        assert tools["team_send"] == tools["board_add"] == ("teams", "allow")
    document = json.loads(kernos("config", "check", "--json", cwd=tmp_path).stdout)
    assert document["rules"]["explore"]["task"] == "deny"
    assert document["rules"]["main"]["task"] == "allow"
    assert document["rules"]["main"]["task_send"] == "ask"
    assert document["rules"]["main"]["team_wait"] == "allow"


def delegate(
    server: FakeOpenAIServer, project: Path, grant: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``kernos run delegate`` in ``project``: the main agent spawns an explore child (``task``
    with ``grant`` added to its arguments), which answers; the first request of each."""
    from tests._agents import agent_is

    spawn = {"prompt": "Survey.", "subagent_type": "explore", "name": "survey", **grant}
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "delegate")),
        text("Surveyed.", when=agent_is("EXPLORE-AGENT")),
        text("Done.", when=agent_is("MAIN-AGENT", "Surveyed.")),
    )
    run = kernos("run", "delegate", cwd=project, env=server.env())
    assert run.returncode == 0, run.stderr
    parent = next(r for r in server.requests if agent_is("MAIN-AGENT")(r))
    child = next(r for r in server.requests if agent_is("EXPLORE-AGENT")(r))
    return parent, child


def test_deny_task_means_a_child_cannot_spawn(server: FakeOpenAIServer, tmp_path: Path) -> None:
    from tests._agents import CONFIG

    (tmp_path / "kernos.toml").write_text(
        CONFIG + '\n[tasks]\nmax_depth = 2\n\n[agents.explore.permissions]\ndeny = ["task"]\n'
    )
    parent, child = delegate(server, tmp_path, {})
    assert "task" in offered(parent)
    assert "task" not in offered(child)  # its own agent's table denies it: it cannot spawn
    assert "task_output" in offered(child)  # max_depth 2: the child has the task tools


def test_a_child_is_ruled_by_its_own_agents_table(server: FakeOpenAIServer, tmp_path: Path) -> None:
    from tests._agents import CONFIG

    (tmp_path / "kernos.toml").write_text(
        CONFIG + '\n[agents.explore.permissions]\ndeny = ["search_files", "list_files"]\n'
    )
    parent, child = delegate(server, tmp_path, {"tools": ["search_files"]})
    assert {"search_files", "list_files"} <= offered(parent)
    assert not offered(child) & {"search_files", "list_files"}  # even when the parent grants it
    assert "read_file" in offered(child)


def test_a_request_is_shown_with_secrets_scrubbed() -> None:
    from kernos.runtime import ApprovalRequest, forget_secrets, register_secrets, request_text

    register_secrets("tok-4f9a8b7c6d5e")
    try:
        shown = request_text(
            ApprovalRequest(
                "write_file",
                {"path": "env.txt", "content": "KEY=tok-4f9a8b7c6d5e\n"},
                "main",
                None,
                "the tool's own default",
                "+KEY=tok-4f9a8b7c6d5e\n",
            )
        )
    finally:
        forget_secrets()
    assert "tok-4f9a8b7c6d5e" not in shown
    assert shown.splitlines() == [
        "kernos: write_file needs your approval (agent main; the tool's own default)",
        '  path: "env.txt"',
        "+KEY=[redacted]",
    ]


async def test_a_guarded_call_is_ruled_by_its_path(tmp_path: Path) -> None:
    from kernos.boundary import ToolContext, call_tool
    from kernos.runtime import Permissions, load_config
    from kernos.tools import LocalWorkspace, write_tools

    (tmp_path / "kernos.toml").write_text(
        '[permissions]\nallow = ["write_file(docs/**)"]\ndeny = ["write_file(src/**)"]\n'
    )
    (tmp_path / "docs").mkdir()
    permissions = Permissions(load_config(cwd=tmp_path))
    spec = write_tools(LocalWorkspace([tmp_path]))[0]
    assert permissions.offered("main", spec)  # a path-scoped deny leaves the tool offered
    guarded = permissions.guard(spec)
    assert permissions.guard(guarded) is guarded  # guarded once

    async def write(path: str) -> str | None:
        result = await call_tool(guarded, {"path": path, "content": "x"}, ToolContext())
        return result.code

    assert await write("docs/a.md") is None
    assert (tmp_path / "docs" / "a.md").read_text() == "x"
    assert await write("src/a.py") == "denied"
    assert await write("README.md") == "approval_required"  # its own default: ask; nobody here
    assert not (tmp_path / "src").exists() and not (tmp_path / "README.md").exists()


def test_the_team_tools_can_be_ruled(tmp_path: Path) -> None:
    """The team tools exist only once a team forms: a rule naming them is not a misspelling."""
    (tmp_path / "kernos.toml").write_text(
        '[permissions]\nask = ["team_*", "board_add"]\ndeny = ["board_update"]\n'
    )
    done = kernos("config", "check", cwd=tmp_path)
    assert "matches no tool" not in done.stdout + done.stderr
