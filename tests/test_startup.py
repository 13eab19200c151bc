"""Start-up: the light commands never import the model machinery.

Each command runs in a fresh interpreter through ``kernos.cli.main``, exactly as the ``kernos``
script runs it; afterwards the process reports which top-level modules it loaded. The model stack
(pydantic-ai, the provider SDKs) and the client libraries of channel kinds not configured must be
absent; ``--help`` and ``--version`` do not even load pydantic (no config is read).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer, text

#: runs argv[2:] as ``kernos ...`` and writes {"exit", "modules"} as JSON to argv[1]
PROBE = """
import gc, json, sys
from kernos.cli import main

report, sys.argv = sys.argv[1], ["kernos", *sys.argv[2:]]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code or 0
modules = sorted({name.partition(".")[0] for name in sys.modules})
with open(report, "w", encoding="utf-8") as out:
    json.dump({"exit": code, "modules": modules, "full": sorted(sys.modules),
               "frozen": gc.get_freeze_count()}, out)
"""

#: what only a command that talks to a model (or sends through such a channel) may load
MODEL_STACK = {"pydantic_ai", "openai", "anthropic", "genai_prices", "tiktoken"}
CHANNEL_CLIENTS = {"apprise", "aiosmtplib"}

CONFIG = """\
[channels.log]
kind = "file"
path = "out/log.jsonl"
description = "Where the agent writes its log."
"""


def run_light(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done, modules, _ = run_probe(tmp_path, *args)
    return done, modules


def run_probe(
    tmp_path: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], set[str], set[str]]:
    """Like :func:`run_light`, also returning every module's full name."""
    report = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert report.exists(), done.stderr
    loaded = json.loads(report.read_text(encoding="utf-8"))
    assert loaded["exit"] == 0, done.stderr
    return done, set(loaded["modules"]), set(loaded["full"])


#: every command module: a command loads its own (``kernos.cli.COMMANDS``), ``--help`` all of them
COMMAND_MODULES = {
    f"kernos.cli.{name}"
    for name in (
        "run", "demo", "compress", "send", "tools", "mcp", "usage", "worker", "sessions", "tasks",
        "config", "init",
    )
}  # fmt: skip

#: what typer's help panels would load and kernos never shows: markdown help, rich tracebacks
UNSHOWN_RICH = {"rich.markdown", "rich.syntax", "rich.traceback", "rich.pretty"}
UNSHOWN_LIBRARIES = {"markdown_it", "pygments", "attr"}

#: what each light command must not load beyond the model stack (the cuts that
#: brought them near the floor of a bare typer app)
NOT_LOADED = {
    ("--help",): UNSHOWN_RICH,
    ("--version",): COMMAND_MODULES | UNSHOWN_RICH | {"kernos.cli._common", "typer.rich_utils"},
    ("tasks", "list"): (COMMAND_MODULES - {"kernos.cli.tasks"}) | UNSHOWN_RICH,
    ("channels",): (COMMAND_MODULES - {"kernos.cli.send"})
    | UNSHOWN_RICH
    | {
        "kernos.runtime._config._config",  # only [channels] is read (read_channels)
        "kernos.boundary._tool",
        "kernos.boundary._schema",
        "kernos.boundary._schema_tool",
        "kernos.output._kernel",
        "kernos.output._tools",
        "kernos.output._receipt",
        "asyncio",
        "ssl",
        "rich.console",  # the table goes to stdout as text
    },
}


@pytest.mark.parametrize("args", list(NOT_LOADED), ids=" ".join)
def test_each_light_command_loads_only_what_it_uses(tmp_path: Path, args: tuple[str, ...]) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    done, modules, full = run_probe(tmp_path, *args)
    assert done.stdout
    assert sorted(full & NOT_LOADED[args]) == []
    assert sorted(modules & UNSHOWN_LIBRARIES) == []
    assert sorted(modules & (MODEL_STACK | CHANNEL_CLIENTS)) == []


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_load_neither_models_nor_config(tmp_path: Path, flag: str) -> None:
    done, modules = run_light(tmp_path, flag)
    assert "kernos" in done.stdout
    assert sorted(modules & (MODEL_STACK | CHANNEL_CLIENTS)) == []
    assert sorted(modules & {"pydantic", "yaml", "httpx"}) == []


def test_tasks_list_loads_no_model_stack(tmp_path: Path) -> None:
    done, modules = run_light(tmp_path, "tasks", "list")
    assert done.stdout == "(no tasks)\n"
    assert "sqlite3" in modules  # the probe saw the store being read
    assert sorted(modules & (MODEL_STACK | CHANNEL_CLIENTS)) == []
    assert "psycopg" not in modules  # PostgreSQL's driver only when a PostgreSQL URL is set


#: what a command that only reads the store does not need (the cuts that got
#: ``tasks`` near the floor): the config models, an event loop, rich's console, the boundary
NOT_FOR_THE_STORE = {
    "kernos.runtime._config._config",
    "kernos.runtime._config._config_tables",
    "kernos.runtime._config._config_load",
    "asyncio",
    "rich.console",
    "kernos.boundary",
}


@pytest.mark.parametrize(
    "args", [("tasks", "list"), ("tasks", "list", "--json"), ("tasks", "list", "-n", "3")]
)
def test_task_commands_read_the_store_without_the_config_models(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    report = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    loaded = json.loads(report.read_text(encoding="utf-8"))
    assert loaded["exit"] == 0
    assert sorted(set(loaded["full"]) & NOT_FOR_THE_STORE) == []
    assert sorted(set(loaded["modules"]) & (MODEL_STACK | CHANNEL_CLIENTS)) == []


@pytest.mark.parametrize("args", [("--version",), ("run", " ")], ids=" ".join)
def test_a_command_leaves_what_it_made_to_the_os_at_exit(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    # the interpreter's collections at exit walk every object the command made (pydantic-ai,
    # the provider SDKs, DBOS): half a second of each `kernos run`'s end. Frozen once the
    # command is over, whatever its exit (an error too), they are not walked
    report = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    loaded = json.loads(report.read_text(encoding="utf-8"))
    assert loaded["exit"] == (0 if args == ("--version",) else 2)
    assert loaded["frozen"] > 0


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_show_completion_is_light(tmp_path: Path, shell: str) -> None:
    done, modules, full = run_probe(tmp_path, "--show-completion", shell)
    assert "_KERNOS_COMPLETE" in done.stdout
    assert sorted(modules & (MODEL_STACK | CHANNEL_CLIENTS | {"pydantic"})) == []
    assert "kernos.runtime._config._config" not in full


def test_channels_loads_only_the_configured_kind(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    done, modules = run_light(tmp_path, "channels")
    row = done.stdout.splitlines()[1]
    assert row.startswith("log ") and row.endswith("  Where the agent writes its log."), row
    assert sorted(modules & (MODEL_STACK | CHANNEL_CLIENTS)) == []


def test_the_tools_of_a_config_without_mcp_servers_load_no_mcp_sdk(tmp_path: Path) -> None:
    # the MCP SDK is ~0.9 s of CPU: `kernos run` and `kernos worker` build the same catalog as
    # `kernos tools`, and load it only for [mcp] servers
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    done, modules = run_light(tmp_path, "tools")
    assert done.stdout.startswith("NAME") and "read_file" in done.stdout
    assert "mcp" not in modules


LAZY_PACKAGES = [
    "kernos.boundary",
    "kernos.runtime",
    "kernos.tasks",
    "kernos.compress",
    "kernos.output",
    "kernos.output.channels",
    "kernos.tools",
]


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_lazy_names_match_all_and_their_modules(name: str) -> None:
    from kernos._lazy import checked_imports

    package = importlib.import_module(name)
    assert package.__file__ is not None
    exports = checked_imports(Path(package.__file__).read_text(encoding="utf-8"))
    assert sorted(exports) == sorted(package.__all__)
    for public, module in exports.items():
        defining = importlib.import_module(module)
        assert getattr(package, public) is getattr(defining, public)
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        package.nope  # noqa: B018


def test_a_store_named_in_the_config_goes_through_the_whole_config(tmp_path: Path) -> None:
    # a [store] table (or KERNOS_STORE_URL) names where the store is: the light path must not
    # guess the SQLite file; the whole config is loaded and its error, if any, is exit 2
    (tmp_path / "kernos.toml").write_text('[store]\nurl = "not a url"\n', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "kernos", "tasks", "list"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "kernos.toml: store" in done.stderr


def test_a_run_never_loads_the_openai_sdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pydantic-ai's OpenAIChatModel stands on the openai SDK (~0.3 s of imports); kernos's loop
    # drives openai-chat models over its own client, so the model is never made
    with FakeOpenAIServer(text("hello")) as server:
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        done, modules = run_light(tmp_path, "run", "hi", "-q", "--model", "openai-chat:m")
    assert done.stdout == "hello\n"
    assert "openai" not in modules
    assert "pydantic_ai" in modules
