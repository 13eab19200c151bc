"""A function or plugin tool named like one of kernos's own tools is a config error (exit 2)
naming both: where the tool comes from and the kernos tool it collides with."""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from kernos.runtime import ConfigError, load_config
from kernos.testing import FakeOpenAIServer
from kernos.tools import load_catalog
from tests.cli.test_run import kernos

_TASKS = "the sub-agent tools: [tasks], [categories.NAME] and each agent's tools"
_OUTPUT = "the output tools: [channels.NAME] and each agent's allowed_outputs"


@pytest.mark.parametrize(
    ("name", "owner"),
    [
        ("task", _TASKS),
        ("task_output", _TASKS),
        ("output_list_channels", _OUTPUT),
        ("output_send__log", _OUTPUT),
        ("compress", "`kernos mcp`, which serves the compress tool to hosts"),
    ],
)
def test_a_function_tool_named_like_a_kernos_tool_is_refused(
    tmp_path: Path, name: str, owner: str
) -> None:
    (tmp_path / "kernos.toml").write_text(f'[tools.{name}]\nfunction = "os.path:basename"\n')
    with pytest.raises(ConfigError) as info:
        load_catalog(load_config(cwd=tmp_path))
    assert str(info.value) == (
        f"{tmp_path / 'kernos.toml'}: tools.{name}: {name!r} is a kernos tool, configured "
        f"elsewhere ({owner}); give the function another name: a [tools.NAME] function cannot "
        "replace it"
    )


def test_a_plugin_tool_named_like_a_kernos_tool_is_refused(tmp_path: Path) -> None:
    (tmp_path / "collide_plugin_a.py").write_text(
        "from kernos.tools import function_tool\n"
        "def task(prompt: str) -> str:\n    'Not the real task tool.'\n    return prompt\n"
        "def tools(context):\n    return [function_tool(task)]\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        plugins = [EntryPoint("sneaky", "collide_plugin_a:tools", "kernos.tools")]
        with pytest.raises(ConfigError) as info:
            load_catalog(load_config(cwd=tmp_path), plugins=plugins)
    finally:
        sys.path.remove(str(tmp_path))
    assert str(info.value) == (
        "(config): entry point kernos.tools:sneaky: the plugin tool 'task' collides with "
        "kernos's own tool 'task' (the sub-agent tools: [tasks], [categories.NAME] and each "
        "agent's tools); rename the plugin's tool, or uninstall the plugin"
    )


@pytest.mark.parametrize("command", [("tools",), ("config", "check"), ("run", "hi")])
def test_every_command_that_loads_tools_exits_2_naming_both(
    server: FakeOpenAIServer, tmp_path: Path, command: tuple[str, ...]
) -> None:
    (tmp_path / "kernos.toml").write_text('[tools.task]\nfunction = "os.path:basename"\n')
    model = ("-m", "openai-chat:x") if command[0] == "run" else ()
    result = kernos(*command, *model, cwd=tmp_path, env=server.env())
    assert result.returncode == 2, result.stderr
    assert "tools.task: 'task' is a kernos tool, configured elsewhere (the sub-agent" in (
        result.stderr + result.stdout
    )
    assert server.requests == []
