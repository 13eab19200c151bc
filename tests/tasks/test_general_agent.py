"""The built-in ``general`` agent: a fresh project's ``task`` works when the model names it (our
own instructions, the built-in tools, the parent's model); a call naming no target is still
``no_target``, now naming ``general``; a configured agent called general replaces it. Through
``kernos run`` as a subprocess against the local server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from inline_snapshot import snapshot
from tasks_helpers import agent_is, system
from test_cli import kernos

from kernos.runtime import Config
from kernos.tasks import build_task_description
from kernos.testing import FakeOpenAIServer, text, tool_call

GENERAL = "general-purpose helper working on one assignment"
FRESH = 'default_model = "openai-chat:test"\n'


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with no agents and no categories configured."""
    (tmp_path / "kernos.toml").write_text(FRESH, encoding="utf-8")
    monkeypatch.setenv("KERNOS_HOME", str(tmp_path / ".kernos"))
    monkeypatch.delenv("KERNOS_MODEL", raising=False)
    return tmp_path


def first(server: FakeOpenAIServer, marker: str) -> dict[str, Any]:
    return next(r for r in server.requests if marker in system(r))


def test_a_fresh_project_offers_general_and_a_task_naming_it_runs(
    fresh: Path, server: FakeOpenAIServer
) -> None:
    (fresh / "kernos.toml").write_text(
        FRESH + '\n[agents.lead]\nmodel = "openai-chat:lead-model"\ninstructions = "LEAD"\n',
        encoding="utf-8",
    )
    server.script(
        tool_call(
            "task",
            {"prompt": "Count the modules.", "subagent_type": "general"},
            when=agent_is("LEAD", "count them"),
        ),
        text("Four modules.", when=agent_is(GENERAL)),
        text("There are four.", when=agent_is("LEAD", "Four modules.")),
    )
    run = kernos(fresh, server, "run", "--agent", "lead", "count them")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "There are four.\n"
    parent = first(server, "LEAD")
    task = next(t for t in parent["tools"] if t["function"]["name"] == "task")
    assert "- general: " in task["function"]["description"]
    child = first(server, GENERAL)
    assert child["model"] == "lead-model"  # the parent's model, not default_model
    names = sorted(t["function"]["name"] for t in child.get("tools") or [])
    assert names == ["edit_file", "list_files", "read_file", "search_files", "write_file"]


def test_a_call_naming_no_target_is_still_no_target_and_names_general(
    fresh: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call("task", {"prompt": "Count the modules."}, when=agent_is("", "count them")),
        text("Could not.", when=agent_is("", "Each spawn needs")),
    )
    run = kernos(fresh, server, "run", "count them", "-q")
    assert run.returncode == 0, run.stderr
    answer = server.requests[-1]["messages"][-1]["content"]
    assert answer.startswith("Each spawn needs exactly one of category or subagent_type.")
    assert '{"subagent_type": "general", "prompt": "..."} runs the general agent' in answer


def test_a_configured_general_replaces_the_built_in(fresh: Path, server: FakeOpenAIServer) -> None:
    (fresh / "kernos.toml").write_text(
        FRESH + '\n[agents.general]\ninstructions = "MY-GENERAL"\ntools = []\n', encoding="utf-8"
    )
    server.script(
        tool_call(
            "task",
            {"prompt": "Count the modules.", "subagent_type": "general"},
            when=agent_is("", "count them"),
        ),
        text("Four modules.", when=agent_is("MY-GENERAL")),
        text("There are four.", when=agent_is("", "Four modules.")),
    )
    run = kernos(fresh, server, "run", "count them")
    assert run.returncode == 0, run.stderr
    assert not [r for r in server.requests if GENERAL in system(r)]
    assert not first(server, "MY-GENERAL").get("tools")


def test_the_general_agent_instructions_size_is_pinned() -> None:
    instructions = Config().agent("general").instructions
    print(f"general_agent.md: {len(instructions)} chars")
    assert len(instructions) == snapshot(335)
    assert "- general: " in build_task_description(Config())
