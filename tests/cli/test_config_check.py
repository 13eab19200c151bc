"""``kernos config check``: a good config passes with a short summary on stderr; each
kind of problem gives its own line with the fix, all of them in one pass, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer, text
from tests import _cli
from tests.mcp.conftest import recorder_config


def kernos(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KERNOS_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "CHECK_UNSET")
    }
    full = {**base, "KERNOS_HOME": str(cwd / ".kernos"), **(env or {})}
    return _cli.kernos(*args, cwd=cwd, env=full, timeout=120)


GOOD = """
default_model = "fast"

[models.fast]
model = "openai-chat:qwen3"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "CHECK_KEY"

[agents.main]
instructions = "You coordinate."
allowed_outputs = ["log"]
tools = ["read_file", "rec__*"]

[categories.quick]
model = "openai-chat:small"
timeout = "10m"

[channels.log]
kind = "file"
path = "out/log.jsonl"

[tasks]
max_turns = 20
"""


def test_a_good_config_passes(tmp_path: Path) -> None:
    config = GOOD + recorder_config("rec", tmp_path / "calls.jsonl")
    (tmp_path / "kernos.toml").write_text(config, encoding="utf-8")
    agents = tmp_path / ".kernos" / "agents"
    agents.mkdir(parents=True)
    (agents / "explore.md").write_text("---\ndescription: research\nmax_turns: 5\n---\nLook.\n")
    env = {"CHECK_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    done = kernos("config", "check", cwd=tmp_path, env=env)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert done.stderr.startswith(f"config OK: {tmp_path / 'kernos.toml'}: 2 agents, 1 categories")
    assert "1 mcp servers" in done.stderr
    as_json = json.loads(kernos("config", "check", "--json", cwd=tmp_path, env=env).stdout)
    assert as_json["ok"] is True and as_json["problems"] == []
    assert as_json["checked"]["mcp tools"] >= 1
    mcp_rules = {t: r for t, r in as_json["rules"]["main"].items() if t.startswith("rec__")}
    assert mcp_rules and set(mcp_rules.values()) == {"allow"}  # each MCP tool with its rule


def test_no_config_at_all_is_fine(tmp_path: Path) -> None:
    done = kernos("config", "check", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "config OK: no kernos.toml (defaults)" in done.stderr


#: (config text, the line a problem gives); each is checked alone
PROBLEMS = {
    "syntax": ("[agents.main\n", "kernos.toml: (syntax): not valid TOML"),
    "unknown key": ("[agents.main]\nmodle = 'x'\n", "kernos.toml: agents.main.modle: unknown key"),
    "unset env outside models": (
        '[channels.log]\nkind = "file"\npath = "${CHECK_UNSET}"\n',
        "channels.log.path: environment variable CHECK_UNSET is not set; export CHECK_UNSET=...",
    ),
    "unset env in a model alias": (
        '[models.fast]\nmodel = "openai-chat:x"\nbase_url = "${CHECK_UNSET}"\n',
        "models.fast.base_url: environment variable CHECK_UNSET is not set",
    ),
    "unknown model": (
        '[agents.main]\nmodel = "bogus"\n',
        "kernos.toml: agents.main.model: 'bogus' is neither a provider:model string nor a "
        "configured alias",
    ),
    "model without a key": (
        'default_model = "openai-chat:x"\n',
        "kernos.toml: default_model: model openai-chat:x needs an API key; export OPENAI_API_KEY",
    ),
    "channel": ('[channels.log]\nkind = "fil"\n', "channels.log.kind: unknown channel kind 'fil'"),
    "allowed_outputs": (
        '[agents.main]\nallowed_outputs = ["ghost"]\n',
        "agents.main.allowed_outputs: channel 'ghost' is not configured; define [channels.ghost]",
    ),
    "tool": ('[agents.main]\ntools = ["nosuch"]\n', "agents.main.tools: 'nosuch' matches no tool"),
    "function named like a kernos tool": (
        '[tools.output_list_channels]\nfunction = "os:getcwd"\n',
        "kernos.toml: tools.output_list_channels: 'output_list_channels' is a kernos tool, "
        "configured elsewhere (the output tools: [channels.NAME]",
    ),
    "mcp server": (
        '[mcp.broken]\ncommand = "/nonexistent/kernos-check-cmd"\n',
        "mcp.broken: the server did not start (FileNotFoundError",
    ),
    "budget": ('[tasks]\ntimeout = "soon"\n', "tasks.timeout: 'soon' is not a duration; write a"),
    "workspace": ("[workspace]\nroots = []\n", "workspace.roots: "),
}


@pytest.mark.parametrize("kind", sorted(PROBLEMS))
def test_each_kind_of_problem_gives_its_line(tmp_path: Path, kind: str) -> None:
    config, line = PROBLEMS[kind]
    (tmp_path / "kernos.toml").write_text(config, encoding="utf-8")
    done = kernos("config", "check", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, lines
    assert line in lines[0]
    assert done.stderr == "1 problem found\n"


@pytest.mark.parametrize("where", ["kernos.toml", "front matter"])
def test_deep_nesting_is_one_line_and_exit_2_for_every_command(tmp_path: Path, where: str) -> None:
    # a 3,000-deep array in kernos.toml or a 5,000-deep [ in front matter ended every command
    # with a 190 KB RecursionError traceback (exit 1)
    if where == "kernos.toml":
        file = tmp_path / "kernos.toml"
        file.write_text("x = " + "[" * 3_000 + "]" * 3_000 + "\n", encoding="utf-8")
        line = (
            f"{file}: (syntax): lists or tables nest more than 64 levels deep; flatten the nesting"
        )
    else:
        file = tmp_path / ".kernos" / "agents" / "deep.md"
        file.parent.mkdir(parents=True)
        file.write_text("---\ntools: " + "[" * 5_000 + "\n---\nBody.\n", encoding="utf-8")
        line = f"{file}: front matter: lists or tables nest more than 64 levels deep; flatten the"
    for command in (("tools",), ("run", "hi", "-m", "openai-chat:x"), ("config", "check")):
        done = kernos(*command, cwd=tmp_path)
        assert done.returncode == 2, (command, done.stderr[-500:])
        assert "Traceback" not in done.stderr
        shown = done.stdout if command[0] == "config" else done.stderr
        assert len(shown.splitlines()) == 1, (command, shown[-500:])
        assert line in shown, (command, shown)


def test_a_bad_agent_file_names_the_file(tmp_path: Path) -> None:
    agents = tmp_path / ".kernos" / "agents"
    agents.mkdir(parents=True)
    (agents / "review.md").write_text("---\nmax_turns: -1\n---\nReview.\n")
    done = kernos("config", "check", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout.startswith(f"{agents / 'review.md'}: max_turns: ")


def test_every_problem_in_one_pass_and_as_json(tmp_path: Path) -> None:
    config = (
        "\n".join(
            PROBLEMS[k][0]
            for k in ("model without a key", "unset env in a model alias", "channel", "mcp server")
        )
        + '\n[agents.main]\nallowed_outputs = ["ghost"]\ntools = ["nosuch"]\n'
    )
    (tmp_path / "kernos.toml").write_text(config, encoding="utf-8")
    done = kernos("config", "check", cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stdout.splitlines()
    for kind in ("unset env in a model alias", "channel", "mcp server", "model without a key",
                 "allowed_outputs", "tool"):  # fmt: skip
        assert sum(PROBLEMS[kind][1] in line for line in lines) == 1, (kind, lines)
    assert len(lines) == 6
    assert done.stderr == "6 problems found\n"
    document = json.loads(kernos("config", "check", "--json", cwd=tmp_path).stdout)
    assert document["ok"] is False
    assert [p["text"] for p in document["problems"]] == lines
    assert set(document["problems"][0]) == {"file", "key", "problem", "fix", "text"}


def test_several_validation_errors_are_all_listed(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[tasks]\ntimeout = "soon"\nmax_turns = -2\n[agents.main]\nmodle = "x"\n'
    )
    done = kernos("config", "check", cwd=tmp_path)
    assert done.returncode == 2
    keys = [line.split(": ")[1] for line in done.stdout.splitlines()]
    assert sorted(keys) == ["agents.main.modle", "tasks.max_turns", "tasks.timeout"]


def test_mcp_selection_that_matches_nothing(tmp_path: Path) -> None:
    config = recorder_config("rec", tmp_path / "calls.jsonl")
    config += '[agents.main]\ntools = ["rec__no_such_tool"]\n'
    (tmp_path / "kernos.toml").write_text(config, encoding="utf-8")
    done = kernos("config", "check", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "agents.main.tools: rec__no_such_tool matches none of the MCP servers' tools" in (
        done.stdout
    )


#: ten mistakes of different kinds in one project: a run of ``config check`` lists every one
TEN_MISTAKES = """
default_modle = "openai-chat:x"

[tasks]
max_turn = 3

[channels.log]
kind = "file"
path = "${CHECK_UNSET}"

[channels.chat]
kind = "fil"

[tools.b]
function = "kernos_check_no_such_module:f"

[tools.c]
function = "os:no_such_function"

[agents.main]
tools = ["read_file", "ghost__*", "b", "c"]
allowed_outputs = ["nowhere"]
timeout = "soon"
"""


def test_ten_planted_mistakes_are_all_reported_in_one_pass(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(TEN_MISTAKES, encoding="utf-8")
    agents = tmp_path / ".kernos" / "agents"
    agents.mkdir(parents=True)
    reviewer = agents / "reviewer.md"
    reviewer.write_text("---\nname: reviewer\ntools: Read, Grep, Bash\nmodel: sonnet\n---\nLook.\n")
    done = kernos("config", "check", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stdout.splitlines()
    expected = [
        "channels.log.path: environment variable CHECK_UNSET is not set",
        "default_modle: unknown key; did you mean 'default_model'?",
        "tasks.max_turn: unknown key; did you mean 'max_turns'?",
        "agents.main.timeout: 'soon' is not a duration",
        "channels.chat.kind: unknown channel kind 'fil'",
        "tools.b.function: cannot import module 'kernos_check_no_such_module'",
        "tools.c.function: module 'os' has no attribute 'no_such_function'",
        "agents.main.tools: 'ghost__*' matches no tool; no [mcp.ghost] server is configured "
        "(MCP servers: none)",
        "agents.main.allowed_outputs: channel 'nowhere' is not configured",
        # the agent file's problems in one message; Read and Grep are mapped, not reported
        f"{reviewer}: agents.reviewer: model: 'sonnet' is a Claude Code model name and no "
        "[models.sonnet] defines it; define [models.sonnet] with the model it stands for, or "
        "write a provider:model string such as anthropic:claude-sonnet-4-5 — and tools: 'Bash' "
        "matches no tool; Bash is a Claude Code tool name: Bash has no kernos equivalent",
    ]
    for line in expected:
        assert sum(line in shown for shown in lines) == 1, (line, lines)
    assert len(lines) == len(expected), lines  # nothing follows from the unset variable
    assert [line.startswith(str(reviewer)) for line in lines] == [False] * 9 + [True]
    assert done.stderr == f"{len(expected)} problems found\n"
    document = json.loads(kernos("config", "check", "--json", cwd=tmp_path).stdout)
    assert [p["text"] for p in document["problems"]] == lines
    unset = document["problems"][lines.index(next(s for s in lines if "CHECK_UNSET" in s))]
    assert {k: unset[k] for k in ("file", "key")} == {
        "file": str(tmp_path / "kernos.toml"),
        "key": "channels.log.path",
    }
    assert unset["fix"] == "export CHECK_UNSET=... or remove the ${CHECK_UNSET} reference"


def test_other_commands_still_stop_at_the_first_problem(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(TEN_MISTAKES, encoding="utf-8")
    done = kernos("tools", cwd=tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "CHECK_UNSET is not set" in done.stderr


def test_model_option_wins_over_an_agent_files_model(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    agents = tmp_path / ".kernos" / "agents"
    agents.mkdir(parents=True)
    (agents / "reviewer.md").write_text("---\nmodel: sonnet\n---\nLook.\n")
    server.script(text("reviewed"))
    done = kernos("run", "hi", "-a", "reviewer", "-m", "openai-chat:x", cwd=tmp_path,
                  env=server.env())  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "reviewed\n"), done.stderr
    without = kernos("run", "hi", "-a", "reviewer", cwd=tmp_path, env=server.env())
    assert without.returncode == 2
    assert "agents.reviewer.model: 'sonnet' is a Claude Code model name" in without.stderr
