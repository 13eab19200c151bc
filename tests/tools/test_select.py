"""Choosing tools: the pure rule, and the catalog that checks every agent at load."""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from kernos.boundary import ToolSpec
from kernos.runtime import ConfigError, Runtime, load_config
from kernos.tools import (
    BUILTIN_NAMES,
    WRITE_NAMES,
    claude_code_hint,
    load_catalog,
    mcp_later,
    select_mcp_tools,
    select_tools,
    unmatched,
)


class _Args(BaseModel):
    pass


async def _run(params: _Args, ctx: Any) -> str:
    return "ok"


def spec(name: str) -> ToolSpec[_Args]:
    return ToolSpec(name, f"The {name} tool.", _Args, _run)


AVAILABLE = [
    spec(n)
    for n in ("read_file", "list_files", "search_files", "git__log", "git__diff", "docs__search")
]


def names(specs: list[ToolSpec[Any]]) -> list[str]:
    return [s.name for s in specs]


def test_no_key_gets_the_defaults_and_an_empty_list_gets_none() -> None:
    assert names(select_tools(None, AVAILABLE, defaults=BUILTIN_NAMES)) == list(BUILTIN_NAMES)
    assert select_tools([], AVAILABLE, defaults=BUILTIN_NAMES) == []


def test_names_and_globs_in_pattern_order_each_once() -> None:
    chosen = select_tools(["read_file", "git__*", "docs__search", "git__log"], AVAILABLE)
    assert names(chosen) == ["read_file", "git__diff", "git__log", "docs__search"]
    assert names(select_tools(["*_files"], AVAILABLE)) == ["list_files", "search_files"]
    assert names(select_tools(["{read,list}_file*"], AVAILABLE)) == ["list_files", "read_file"]
    assert select_tools(["READ_FILE"], AVAILABLE) == []  # names are case-sensitive


def test_unmatched_names_except_mcp_names_checked_later() -> None:
    known = [s.name for s in AVAILABLE]
    later = mcp_later(["git"])
    assert unmatched(["read_file", "bash", "git__nope", "web__*", "x_*"], known, later=later) == [
        "bash",
        "web__*",
        "x_*",
    ]
    # without [mcp] support known, any server__tool name waits for its server
    assert unmatched(["web__fetch"], known, later=mcp_later(None)) == []


def test_claude_code_names_are_translated() -> None:
    assert claude_code_hint(["Read", "Grep", "Glob"]) == (
        "Read, Grep, Glob are Claude Code tool names: kernos calls Read read_file and Grep "
        "search_files and Glob list_files"
    )
    assert claude_code_hint(["Bash"]) == (
        "Bash is a Claude Code tool name: Bash has no kernos equivalent (kernos has no shell "
        "tool; add one through an [mcp.NAME] server or a [tools.NAME] function)"
    )
    assert claude_code_hint(["read_fil"]) is None


# -- the catalog at load ----------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return tmp_path


def test_the_builtins_are_plugins_and_main_gets_them_by_default(project: Path) -> None:
    catalog = load_catalog(load_config(cwd=project))
    assert [(e.spec.name, e.source) for e in catalog.for_agent("main")] == [
        ("read_file", "builtin"),
        ("list_files", "builtin"),
        ("search_files", "builtin"),
        ("write_file", "builtin"),
        ("edit_file", "builtin"),
    ]


def test_function_tools_from_config(project: Path) -> None:
    write(
        project / "helpers" / "weather_tools_a.py",
        'def forecast(city: str, days: int = 1) -> str:\n    """Forecast for a city."""\n'
        '    return f"{city}:{days}"\n',
    )
    write(project / "helpers" / "__init__.py", "")
    write(
        project / "kernos.toml",
        '[tools.forecast]\nfunction = "helpers.weather_tools_a:forecast"\n'
        '[agents.main]\ntools = ["forecast", "read_*"]\n'
        "[agents.quiet]\ntools = []\n",
    )
    catalog = load_catalog(load_config(cwd=project))
    assert [(e.spec.name, e.source, e.summary) for e in catalog.for_agent("main")] == [
        ("forecast", "function", "Forecast for a city"),
        ("read_file", "builtin", "Read a text file in the workspace"),
    ]
    assert catalog.for_agent("quiet") == []


@pytest.mark.parametrize(
    ("function", "says"),
    [
        ("no_such_module_xyz:f", "tools.t.function: cannot import module 'no_such_module_xyz'"),
        ("os.path:no_such_attr", "tools.t.function: module 'os.path' has no attribute"),
        ("os.path.join", "tools.t.function: 'os.path.join' is not a function reference; write"),
        ("os:sep", "tools.t.function: '/' is not callable; point it at a plain function"),
    ],
)
def test_a_bad_function_reference_is_a_config_error(
    project: Path, function: str, says: str
) -> None:
    write(project / "kernos.toml", f'[tools.t]\nfunction = "{function}"\n')
    with pytest.raises(ConfigError) as info:
        load_catalog(load_config(cwd=project))
    assert says in str(info.value)
    assert str(info.value).startswith(str(project / "kernos.toml"))


def test_a_bad_tool_name_and_a_collision_are_config_errors(project: Path) -> None:
    write(project / "kernos.toml", '[tools."bad name"]\nfunction = "os.path:basename"\n')
    with pytest.raises(ConfigError, match=r"tools.bad name: 'bad name' is not a valid tool name"):
        load_catalog(load_config(cwd=project))
    write(project / "kernos.toml", '[tools.read_file]\nfunction = "os.path:basename"\n')
    with pytest.raises(
        ConfigError, match="tool 'read_file' is offered by builtin and by function; rename"
    ):
        load_catalog(load_config(cwd=project))


def test_an_unknown_tool_name_is_a_config_error_listing_what_exists(project: Path) -> None:
    write(project / "kernos.toml", '[agents.explore]\ntools = ["read_file", "shell", "x_*"]\n')
    with pytest.raises(ConfigError) as info:
        load_catalog(load_config(cwd=project))
    assert str(info.value) == (
        f"{project / 'kernos.toml'}: agents.explore.tools: 'shell', 'x_*' match no tool; "
        "use names from the available tools: read_file, list_files, search_files, write_file, "
        "edit_file; add a [tools.NAME] function or an [mcp.NAME] server"
    )


def test_kernos_own_tools_and_mcp_names_are_accepted(project: Path) -> None:
    write(
        project / "kernos.toml",
        '[agents.explore]\ntools = ["task", "output_send__log", "git__*", "docs__search"]\n'
        '[mcp.git]\ncommand = "mcp-server-git"\n[mcp.docs]\nurl = "http://127.0.0.1:1/mcp"\n',
    )
    load_catalog(load_config(cwd=project))  # no error: granted from the parent / MCP later


def test_a_server_name_that_is_not_configured_is_an_error_at_load(project: Path) -> None:
    write(project / "kernos.toml", '[agents.explore]\ntools = ["git__*"]\n')
    with pytest.raises(ConfigError, match="git__"):
        load_catalog(load_config(cwd=project))


def test_claude_code_tool_names_in_an_agent_file_are_mapped(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNOS_HOME", str(project / ".kernos"))
    write(
        project / ".kernos" / "agents" / "reviewer.md",
        "---\nname: reviewer\ndescription: Reviews code\ntools: Read, Grep, Glob, LS\n---\n"
        "Review.\n",
    )
    catalog = load_catalog(load_config(cwd=project))
    assert [e.spec.name for e in catalog.for_agent("reviewer")] == [
        "read_file",
        "search_files",
        "list_files",
    ]


def test_claude_code_tool_names_in_kernos_toml_get_a_clear_message(project: Path) -> None:
    write(project / "kernos.toml", '[agents.reviewer]\ntools = ["Read", "Bash"]\n')
    with pytest.raises(ConfigError) as info:
        load_catalog(load_config(cwd=project))
    assert str(info.value) == (
        f"{project / 'kernos.toml'}: agents.reviewer.tools: 'Read', 'Bash' match no tool; Read, "
        "Bash are Claude Code tool names: kernos calls Read read_file; Bash has no kernos "
        "equivalent (kernos has no shell tool; add one through an [mcp.NAME] server or a "
        "[tools.NAME] function); use names from the available tools: read_file, list_files, "
        "search_files, write_file, edit_file"
    )


@pytest.mark.parametrize(
    ("model", "says"),
    [
        (
            "sonnet",
            "'sonnet' is a Claude Code model name and no [models.sonnet] defines it; define "
            "[models.sonnet] with the model it stands for, or write a provider:model string "
            "such as anthropic:claude-sonnet-4-5",
        ),
        (
            "inherit",
            "'inherit' is a Claude Code model name; remove the model line: a kernos agent "
            "without one runs on the default model",
        ),
    ],
)
def test_claude_code_model_names_get_a_clear_message(
    project: Path, monkeypatch: pytest.MonkeyPatch, model: str, says: str
) -> None:
    monkeypatch.setenv("KERNOS_HOME", str(project / ".kernos"))
    agent = write(
        project / ".kernos" / "agents" / "reviewer.md", f"---\nmodel: {model}\n---\nReview.\n"
    )
    config = load_config(cwd=project)  # a problem only when the agent's own model is chosen
    runtime = Runtime(config)
    with pytest.raises(ConfigError) as info:
        runtime.model_name("reviewer")
    assert str(info.value) == f"{agent}: agents.reviewer.model: {says}"
    assert runtime.model_name("reviewer", "openai-chat:x") == "openai-chat:x"  # --model wins
    # an alias of that name is honoured
    write(project / "kernos.toml", f'[models.{model}]\nmodel = "openai-chat:x"\n')
    assert load_config(cwd=project).agents["reviewer"].model == model


# -- plugins --------------------------------------------------------------------------------


def test_a_plugin_factory_adds_tools_selected_by_name(project: Path) -> None:
    write(
        project / "my_tool_plugin_a.py",
        "from kernos.tools import function_tool\n"
        "def ping(host: str) -> str:\n    'Ping a host.'\n    return 'pong ' + host\n"
        "def tools(context):\n    return [function_tool(ping)]\n",
    )
    sys.path.insert(0, str(project))
    write(project / "kernos.toml", '[agents.main]\ntools = ["ping", "read_file"]\n')
    plugins = [
        EntryPoint("workspace", "kernos.tools:workspace_tools", "kernos.tools"),
        EntryPoint("net", "my_tool_plugin_a:tools", "kernos.tools"),
    ]
    catalog = load_catalog(load_config(cwd=project), plugins=plugins)
    assert [(e.spec.name, e.source) for e in catalog.for_agent("main")] == [
        ("ping", "plugin:net"),
        ("read_file", "builtin"),
    ]
    # a plugin's tools are not defaults
    assert catalog.defaults == [*BUILTIN_NAMES, *WRITE_NAMES]


def test_a_broken_plugin_is_a_config_error_naming_it(project: Path) -> None:
    plugins = [EntryPoint("broken", "no_such_plugin_mod:tools", "kernos.tools")]
    with pytest.raises(ConfigError) as info:
        load_catalog(load_config(cwd=project), plugins=plugins)
    assert "entry point kernos.tools:broken (no_such_plugin_mod:tools): failed to load" in str(
        info.value
    )


def test_mcp_tools_follow_the_agents_selection_and_a_dead_server_pattern_is_reported() -> None:
    mcp = [s for s in AVAILABLE if "__" in s.name]
    everything, missing = select_mcp_tools(None, mcp, ["git", "docs"])
    assert [s.name for s in everything] == ["git__log", "git__diff", "docs__search"]
    assert missing == []
    chosen, missing = select_mcp_tools(
        ["read_file", "git__*", "docs__fetch", "other__x"], mcp, ["git", "docs"]
    )
    assert sorted(s.name for s in chosen) == ["git__diff", "git__log"]
    assert missing == ["docs__fetch"]  # `other` is no server: the load-time check names it
    assert select_mcp_tools([], mcp, ["git"]) == ([], [])
