"""``kernos.toml``, ${ENV}, agent files, errors naming file/key/fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernos.runtime import ConfigError, load_config
from kernos.testing import FakeOpenAIServer


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_no_file_means_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNOS_HOME", raising=False)
    config = load_config(cwd=tmp_path)
    assert config.default_model is None and config.path is None
    assert config.home == (tmp_path / ".kernos").resolve()
    assert config.agent("main").instructions == ""


def test_full_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "s3cret")
    write(
        tmp_path / "kernos.toml",
        """
default_model = "fast"
[models.fast]
model = "openai-chat:qwen3"
base_url = "http://127.0.0.1:11434/v1"
api_key_env = "OLLAMA_API_KEY"
[agents.main]
instructions = "You are helpful."
allowed_outputs = ["log"]
[agents.explore]
description = "Read-only research"
model = "openai-chat:gpt-5-mini"
[categories.quick]
description = "Small, fast edits"
model = "openai-chat:gpt-5-mini"
[channels.hook]
kind = "webhook"
headers = { Authorization = "Bearer ${HOOK_TOKEN}" }
""",
    )
    config = load_config(cwd=tmp_path)
    assert config.models["fast"].base_url == "http://127.0.0.1:11434/v1"
    assert config.agents["main"].allowed_outputs == ["log"]
    assert config.categories["quick"].description == "Small, fast edits"
    assert config.channels["hook"]["headers"]["Authorization"] == "Bearer s3cret"


def test_unknown_key_names_file_key_and_fix(tmp_path: Path) -> None:
    path = write(tmp_path / "kernos.toml", '[agents.main]\ninstrutions = "x"\n')
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path)
    assert str(info.value) == (
        f"{path}: agents.main.instrutions: unknown key; did you mean 'instructions'? (or remove it)"
    )
    write(tmp_path / "kernos.toml", 'default_modle = "x"\n[tasks]\nzzz = 1\n')
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path)
    assert sorted(str(p) for p in (info.value, *info.value.others)) == [
        f"{path}: default_modle: unknown key; did you mean 'default_model'? (or remove it)",
        f"{path}: tasks.zzz: unknown key; remove it or check its spelling in the docs",
    ]


def test_bad_value_and_bad_syntax(tmp_path: Path) -> None:
    write(tmp_path / "kernos.toml", "[tasks]\nmax_depth = -1\n")
    with pytest.raises(ConfigError, match=r"tasks\.max_depth: .*greater than or equal to 0"):
        load_config(cwd=tmp_path)
    write(tmp_path / "kernos.toml", "default_model = \n")
    with pytest.raises(ConfigError, match=r"\(syntax\): not valid TOML"):
        load_config(cwd=tmp_path)


def test_missing_env_reference_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    write(tmp_path / "kernos.toml", '[channels.hook]\nkind = "webhook"\nurl = "${NOPE_TOKEN}"\n')
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path)
    assert info.value.key == "channels.hook.url"
    assert "NOPE_TOKEN is not set" in str(info.value)
    assert "export NOPE_TOKEN=" in info.value.fix


def test_explicit_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.toml", cwd=tmp_path)


def test_agent_markdown_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNOS_HOME", str(tmp_path / "state"))
    write(
        tmp_path / "state" / "agents" / "explore.md",
        "---\ndescription: Read-only research\nmodel: openai-chat:small\ntools: read, grep\n---\n"
        "You explore code.\nNever edit.\n",
    )
    config = load_config(cwd=tmp_path)
    agent = config.agents["explore"]
    assert agent.description == "Read-only research"
    assert agent.model == "openai-chat:small"
    assert agent.tools == ["read", "grep"]
    assert agent.instructions == "You explore code.\nNever edit."
    assert agent.source == str(tmp_path / "state" / "agents" / "explore.md")


def test_agent_file_errors_name_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNOS_HOME", str(tmp_path / "state"))
    path = write(tmp_path / "state" / "agents" / "x.md", "---\ncolour: blue\n---\nbody\n")
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path)
    assert info.value.file == str(path) and info.value.key == "colour"


def test_unknown_agent_lists_known_ones(tmp_path: Path) -> None:
    write(tmp_path / "kernos.toml", "[agents.explore]\n")
    config = load_config(cwd=tmp_path)
    with pytest.raises(ConfigError, match="known agents: explore"):
        config.agent("writer")


@pytest.mark.parametrize("value", ["0", "-1", "61"])
def test_a_task_poll_interval_outside_its_range_is_a_config_error(
    tmp_path: Path, value: str
) -> None:
    write(tmp_path / "kernos.toml", f"[tasks]\npoll = {value}\n")
    with pytest.raises(ConfigError, match=r"tasks\.poll: "):
        load_config(cwd=tmp_path)
    write(tmp_path / "kernos.toml", "[tasks]\npoll = 0.5\n")
    assert load_config(cwd=tmp_path).tasks.poll == 0.5
    write(tmp_path / "kernos.toml", "")
    assert load_config(cwd=tmp_path).tasks.poll == 0.1


def test_config_nesting_is_bounded_at_the_documented_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def nested(levels: int) -> str:
        return "[" * levels + "]" * levels

    # {channels: {c: {x: [[...]]}}}: three tables, then the lists
    write(tmp_path / "kernos.toml", f'[channels.c]\nkind = "file"\nx = {nested(61)}\n')
    load_config(cwd=tmp_path)  # 64 levels: fine
    for levels in (62, 3_000):  # 65 levels parses but is refused; 3,000 would end tomllib
        write(tmp_path / "kernos.toml", f'[channels.c]\nkind = "file"\nx = {nested(levels)}\n')
        with pytest.raises(ConfigError) as info:
            load_config(cwd=tmp_path)
        assert (info.value.file, info.value.key) == (str(tmp_path / "kernos.toml"), "(syntax)")
        assert str(info.value).endswith(
            ": lists or tables nest more than 64 levels deep; flatten the nesting"
        )


def test_front_matter_nesting_is_bounded_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNOS_HOME", str(tmp_path / "state"))
    agent = tmp_path / "state" / "agents" / "deep.md"
    write(agent, "---\ndescription: " + "[" * 63 + "]" * 63 + "\n---\nBody.\n")
    with pytest.raises(ConfigError) as info:  # 64 levels: read, then refused as a description
        load_config(cwd=tmp_path)
    assert info.value.key == "description"
    for text in ("[" * 64 + "]" * 64, "[" * 5_000):  # 65 levels; 5,000 would end PyYAML
        write(agent, f"---\ndescription: {text}\n---\nBody.\n")
        with pytest.raises(ConfigError) as info:
            load_config(cwd=tmp_path)
        assert (info.value.file, info.value.key) == (str(agent), "front matter")
        assert "nest more than 64 levels deep" in info.value.problem


@pytest.mark.parametrize(
    "name", ["task", "task_send", "task_output", "task_cancel", "output_list_channels",
             "output_send__log"],
)  # fmt: skip
def test_a_function_named_like_a_kernos_tool_is_a_config_error(tmp_path: Path, name: str) -> None:
    # [tools.task] and [tools.output_list_channels] were dropped for kernos's own, silently
    write(tmp_path / "kernos.toml", f'[tools.{name}]\nfunction = "os:getcwd"\n')
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path)
    assert (info.value.file, info.value.key) == (str(tmp_path / "kernos.toml"), f"tools.{name}")
    assert info.value.problem.startswith(f"{name!r} is a kernos tool, configured elsewhere (the ")
    assert "give the function another name" in info.value.fix
    write(tmp_path / "kernos.toml", '[tools.tasks_due]\nfunction = "os:getcwd"\n')
    assert list(load_config(cwd=tmp_path).tools) == ["tasks_due"]


async def test_every_kernos_tool_a_session_gets_is_a_reserved_name(
    tmp_path: Path, openai_env: FakeOpenAIServer
) -> None:
    from kernos._app import agent_session
    from kernos.runtime import Runtime
    from kernos.runtime._config._config import kernos_tool_home

    write(
        tmp_path / "kernos.toml",
        'default_model = "openai-chat:x"\n[channels.log]\nkind = "file"\npath = "out.jsonl"\n'
        '[agents.main]\nallowed_outputs = ["log"]\n',
    )
    runtime = Runtime.open(cwd=tmp_path)
    try:
        async with agent_session(runtime, "main", wait=False) as (session, _):
            names = set(session.tools)
    finally:
        runtime.close()
    catalog = {
        "read_file",
        "list_files",
        "search_files",
        "write_file",
        "edit_file",
    }  # built-ins: the catalog's check
    assert {"task", "output_list_channels", "output_send__log"} <= names
    assert sorted(n for n in names - catalog if kernos_tool_home(n) is None) == []
