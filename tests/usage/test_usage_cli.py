"""Usage: every model response of a run, children included, is stored; ``kernos run``
prints the run's total on stderr; ``kernos usage`` sums by model, agent or task."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kernos.runtime._session._usage import (
    add_call_counts,
    aggregate,
    parse_since,
    summary_line,
    total,
)
from kernos.testing import FakeOpenAIServer, error, text, tool_call
from tests import _cli
from tests.compress.conftest import approving_agent

CONFIG = """
default_model = "openai-chat:{model}"

[agents.main]
instructions = "MAIN-AGENT: you coordinate."

[agents.explore]
description = "Read-only research"
instructions = "EXPLORE-AGENT: you research."
"""
SPAWN = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
         "run_in_background": False}  # fmt: skip


def is_child(request: dict[str, object]) -> bool:
    return "EXPLORE-AGENT" in json.dumps(request.get("messages"))


def is_parent(request: dict[str, object]) -> bool:
    return not is_child(request)


def kernos(project: Path, server: FakeOpenAIServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(project / ".kernos")}
    return _cli.kernos(*args, cwd=project, env=env, timeout=60)


def run_with_a_child(project: Path, server: FakeOpenAIServer, model: str) -> str:
    (project / "kernos.toml").write_text(CONFIG.format(model=model), encoding="utf-8")
    server.script(
        tool_call("task", SPAWN, when=is_parent),
        text("The survey found 3 modules.", when=is_child),
        text("Survey: 3 modules.", when=is_parent),
    )
    run = kernos(project, server, "run", "survey it")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "Survey: 3 modules.\n"
    return run.stderr


def test_run_total_and_usage_by_agent_and_task(tmp_path: Path, server: FakeOpenAIServer) -> None:
    stderr = run_with_a_child(tmp_path, server, "test")
    document = json.loads(kernos(tmp_path, server, "usage", "--by", "agent", "--json").stdout)
    groups = {g["agent"]: g for g in document["groups"]}
    assert sorted(groups) == ["explore", "main"]
    assert (groups["main"]["requests"], groups["explore"]["requests"]) == (2, 1)
    assert all(g["input_tokens"] > 0 and g["output_tokens"] > 0 for g in groups.values())
    summed = document["total"]
    assert summed["requests"] == 3 and summed["cost"] is None  # "test" has no price
    assert stderr.splitlines()[-1] == (
        f"tokens: {summed['input_tokens']:,} in / {summed['output_tokens']:,} out · cost unknown"
    )
    by_task = json.loads(kernos(tmp_path, server, "usage", "--by", "task", "--json").stdout)
    keys = sorted(g["task"] for g in by_task["groups"])
    assert keys[0] == "(main sessions)" and keys[1].startswith("t_")
    human = kernos(tmp_path, server, "usage").stdout.splitlines()
    assert human[0].split() == ["MODEL", "REQUESTS", "INPUT", "OUTPUT", "CACHED", "COST"]
    assert human[-1].split()[:2] == ["total", "3"] and human[-1].endswith("unknown")
    recent = json.loads(kernos(tmp_path, server, "usage", "--since", "1h", "--json").stdout)
    assert recent["total"]["requests"] == 3
    bad = kernos(tmp_path, server, "usage", "--since", "yesterday")
    assert bad.returncode == 2 and "30m, 12h, 1d or 2w" in bad.stderr


def test_a_known_model_is_priced(tmp_path: Path, server: FakeOpenAIServer) -> None:
    stderr = run_with_a_child(tmp_path, server, "gpt-4o")
    assert "cost $" in stderr.splitlines()[-1], stderr
    document = json.loads(kernos(tmp_path, server, "usage", "--json").stdout)
    assert document["total"]["cost"] > 0


def test_aggregation_rules() -> None:
    rows = [
        {"task_id": None, "agent": "main", "model": "m1", "input_tokens": 10,
         "output_tokens": 2, "cached_tokens": 0, "cost": 0.5},
        {"task_id": "t_1", "agent": "explore", "model": "m1", "input_tokens": 5,
         "output_tokens": 1, "cached_tokens": 3, "cost": None},
    ]  # fmt: skip
    (m1,) = aggregate(rows, "model")
    assert (m1["requests"], m1["input_tokens"], m1["cached_tokens"], m1["cost"]) == (2, 15, 3, None)
    assert [g["agent"] for g in aggregate(rows, "agent")] == ["main", "explore"]
    assert aggregate(rows[:1], "task")[0]["cost"] == 0.5
    assert summary_line(total(rows)) == "tokens: 15 in (3 cached) / 3 out · cost unknown"
    assert summary_line(total([])) == "tokens: 0 in / 0 out · cost $0.0000"
    assert parse_since("1d") == 86400 and parse_since(" 30m ") == 1800
    with pytest.raises(ValueError, match="30m, 12h"):
        parse_since("1 day")


def test_a_failed_run_records_its_usage_and_its_session(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    """Two answers, then the model server refuses the third request: the two responses are
    counted (run total, ``kernos usage``) and the session is listed with the same tokens."""
    (tmp_path / "kernos.toml").write_text(CONFIG.format(model="test"), encoding="utf-8")
    (tmp_path / "notes.txt").write_text("hello\n", encoding="utf-8")
    server.script(
        tool_call("list_files", {"path": "."}),
        tool_call("read_file", {"path": "notes.txt"}),
        error(400, "the request is malformed"),
    )
    run = kernos(tmp_path, server, "run", "look around")
    assert run.returncode != 0, run.stderr
    assert len(server.requests) == 3
    document = json.loads(kernos(tmp_path, server, "usage", "--json").stdout)
    summed = document["total"]
    assert summed["requests"] == 2 and summed["input_tokens"] > 0, run.stderr
    assert f"tokens: {summed['input_tokens']:,} in / {summed['output_tokens']:,} out" in run.stderr
    listed = json.loads(kernos(tmp_path, server, "sessions", "--json").stdout)["sessions"]
    assert len(listed) == 1 and listed[0]["first_prompt"] == "look around"
    assert (listed[0]["input_tokens"], listed[0]["output_tokens"]) == (
        summed["input_tokens"],
        summed["output_tokens"],
    )


def test_tasks_json_carry_each_tasks_tokens_and_cost(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    run_with_a_child(tmp_path, server, "gpt-4o")
    by_task = json.loads(kernos(tmp_path, server, "usage", "--by", "task", "--json").stdout)
    (spent,) = [g for g in by_task["groups"] if g["task"].startswith("t_")]
    (task,) = json.loads(kernos(tmp_path, server, "tasks", "list", "--json").stdout)["tasks"]
    shown = json.loads(kernos(tmp_path, server, "tasks", "show", task["id"], "--json").stdout)
    watched = json.loads(kernos(tmp_path, server, "tasks", "watch", "--once", "--json").stdout)
    (row,) = [r for r in watched["rows"] if r["id"] == task["id"]]
    keys = ("requests", "input_tokens", "output_tokens", "cached_tokens", "cost")
    assert task["id"] == spent["task"] and spent["requests"] == 1 and spent["cost"] > 0
    assert {k: task[k] for k in keys} == {k: spent[k] for k in keys}
    assert {k: shown["task"][k] for k in keys} == {k: spent[k] for k in keys}
    assert {k: row[k] for k in keys if k != "cached_tokens"} == {
        k: spent[k] for k in keys if k != "cached_tokens"
    }


def test_usage_counts_repaired_and_rejected_calls_per_model(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG.format(model="padder"), encoding="utf-8")
    padded = {**SPAWN, "category": "", "model": "", "load_skills": []}
    server.script(
        tool_call("task", padded, when="survey it"),
        text("The survey found 3 modules.", when=is_child),
        tool_call("task", '{"prompt": "cut off', when="The survey found 3 modules."),
        text("Survey: 3 modules.", when="not valid JSON"),
    )
    run = kernos(tmp_path, server, "run", "survey it")
    assert run.returncode == 0, run.stderr
    document = json.loads(kernos(tmp_path, server, "usage", "--json").stdout)
    (group,) = document["groups"]
    assert (group["model"], group["repaired_calls"], group["rejected_calls"]) == ("padder", 1, 1)
    assert (document["total"]["repaired_calls"], document["total"]["rejected_calls"]) == (1, 1)
    by_agent = json.loads(kernos(tmp_path, server, "usage", "--by", "agent", "--json").stdout)
    counts = {g["agent"]: (g["repaired_calls"], g["rejected_calls"]) for g in by_agent["groups"]}
    assert counts == {"main": (1, 1), "explore": (0, 0)}


def test_call_counts_join_their_groups() -> None:
    groups = [{"model": "m1", "requests": 2}]
    summed: dict[str, object] = {"requests": 2}
    calls = [
        {"model": "m1", "agent": "main", "task_id": None, "repaired": 1, "rejected": 0},
        {"model": "m1", "agent": "main", "task_id": None, "repaired": 1, "rejected": 1},
        {"model": None, "agent": "main", "task_id": None, "repaired": 0, "rejected": 1},
    ]
    add_call_counts(groups, summed, calls, "model")
    assert [(g["model"], g["repaired_calls"], g["rejected_calls"]) for g in groups] == [
        ("m1", 2, 1),
        ("unknown", 0, 1),
    ]
    assert (summed["repaired_calls"], summed["rejected_calls"]) == (2, 2)


def test_kernos_compress_records_each_request_as_usage_and_no_session(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    (tmp_path / "kernos.toml").write_text('default_model = "openai-chat:test"\n', "utf-8")
    (tmp_path / "a.md").write_text("You are a helpful assistant. Please answer politely.\n")
    server.script(*approving_agent("a.md", "Answer politely."))
    done = kernos(tmp_path, server, "compress", "--in-place", "a.md")
    assert done.returncode == 0, done.stderr
    document = json.loads(kernos(tmp_path, server, "usage", "--by", "agent", "--json").stdout)
    (group,) = document["groups"]
    assert group["agent"] == "compress" and group["input_tokens"] > 0
    assert group["requests"] == len(server.requests) > 1
    listed = json.loads(kernos(tmp_path, server, "sessions", "--json").stdout)
    assert listed["sessions"] == []  # its drafts are no conversation to list or continue
