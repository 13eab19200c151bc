"""A child's tools: its agent's definition in full (the built-in tools when it has no ``tools``
key), whatever its parent has; the parent's ``tools`` grant adds tools the parent has, and a
grant of one it lacks is refused by name; ``kernos tools --agent X`` lists what a child of X
gets. Through ``kernos run`` as a subprocess against the local server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tasks_helpers import agent_is, system
from test_cli import kernos

from kernos.testing import FakeOpenAIServer, text, tool_call

SPAWN = {"prompt": "Survey the repository.", "subagent_type": "explore"}


def offered(server: FakeOpenAIServer, marker: str) -> list[str]:
    """The tool names of the first request of the agent whose instructions hold ``marker``."""
    request = next(r for r in server.requests if marker in system(r))
    tools: list[dict[str, Any]] = request.get("tools") or []
    return sorted(t["function"]["name"] for t in tools)


#: the task and team tools: listed with their source, offered to a child only where spawning
#: is allowed or a team forms (tests/permissions covers them)
CONDITIONAL = ("tasks", "teams")


def listed(project: Path, server: FakeOpenAIServer, agent: str) -> list[str]:
    shown = kernos(project, server, "tools", "--agent", agent, "--json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)["tools"]
    return sorted(row["name"] for row in rows if row["source"] not in CONDITIONAL)


def main_tools(project: Path, tools: str) -> None:
    """Give the main agent a ``tools`` line (TOML, e.g. ``["read_file"]``) in kernos.toml."""
    config = project / "kernos.toml"
    config.write_text(
        config.read_text(encoding="utf-8").replace(
            'instructions = "MAIN-AGENT: you coordinate."',
            f'instructions = "MAIN-AGENT: you coordinate."\ntools = {tools}',
        ),
        encoding="utf-8",
    )


def test_an_agent_without_a_tools_key_runs_as_a_child_with_the_built_ins(
    project: Path, server: FakeOpenAIServer
) -> None:
    # the parent has no tools of its own to grant: the child's come from its definition
    main_tools(project, "[]")
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Three modules.", when=agent_is("EXPLORE-AGENT")),
        text("Done.", when=agent_is("MAIN-AGENT", "Three modules.")),
    )
    run = kernos(project, server, "run", "survey it")
    assert run.returncode == 0, run.stderr
    assert offered(server, "EXPLORE-AGENT") == [
        "edit_file",
        "list_files",
        "read_file",
        "search_files",
        "write_file",
    ]
    assert offered(server, "EXPLORE-AGENT") == listed(project, server, "explore")


def test_an_agent_file_gets_every_tool_it_lists_though_the_parent_lacks_one(
    project: Path, server: FakeOpenAIServer
) -> None:
    main_tools(project, '["read_file", "search_files"]')
    agents = project / ".kernos" / "agents"
    agents.mkdir(parents=True)
    (agents / "scout.md").write_text(
        "---\ndescription: Scouts\ntools: read_file, search_files, list_files\n---\n"
        "SCOUT-AGENT: you scout.\n",
        encoding="utf-8",
    )
    server.script(
        tool_call(
            "task",
            {"prompt": "Scout it.", "subagent_type": "scout"},
            when=agent_is("MAIN-AGENT", "scout it"),
        ),
        text("Scouted.", when=agent_is("SCOUT-AGENT")),
        text("Done.", when=agent_is("MAIN-AGENT", "Scouted.")),
    )
    run = kernos(project, server, "run", "scout it")
    assert run.returncode == 0, run.stderr
    assert offered(server, "SCOUT-AGENT") == ["list_files", "read_file", "search_files"]
    assert offered(server, "SCOUT-AGENT") == listed(project, server, "scout")


def test_a_grant_of_a_tool_the_parent_lacks_is_refused_by_name(
    project: Path, server: FakeOpenAIServer
) -> None:
    main_tools(project, '["read_file"]')
    server.script(
        tool_call(
            "task", {**SPAWN, "tools": ["list_files"]}, when=agent_is("MAIN-AGENT", "survey it")
        ),
        text("Could not.", when=agent_is("MAIN-AGENT", "which is not one of your tools")),
    )
    run = kernos(project, server, "run", "survey it")
    assert run.returncode == 0, run.stderr
    answer = server.requests[-1]["messages"][-1]["content"]
    assert '"list_files", which is not one of your tools' in answer
    assert not [r for r in server.requests if "EXPLORE-AGENT" in system(r)]  # nothing spawned
    # said on stderr too, by name: a refused grant is never silent
    refused = [line for line in run.stderr.splitlines() if "kernel_tool_missing" in line]
    assert refused and '"list_files"' in refused[0], run.stderr
