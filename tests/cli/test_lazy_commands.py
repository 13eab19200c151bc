"""The root group builds a command when it is used; what a person sees is the same as
when every command module was registered up front: names, order, help text, suggestions."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from kernos import cli


def eager_app() -> typer.Typer:
    """The CLI as it was built before: every module's ``register`` on one plain typer app."""
    app = typer.Typer(
        name="kernos",
        help=cli.app.info.help,
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
    )
    app.callback()(cli._root)
    for module in dict.fromkeys(cli.COMMANDS.values()):
        importlib.import_module(f"kernos.cli.{module}").register(app)
    return app


def test_the_command_map_names_every_command_in_its_order() -> None:
    built = typer.main.get_group(eager_app()).commands
    assert list(built) == list(cli.COMMANDS)


SUBCOMMANDS = [["tasks", name] for name in ("list", "show", "output", "cancel", "watch")]
ARGV = [
    ["--help"],
    [],
    *([name, "--help"] for name in cli.COMMANDS),
    *([*words, "--help"] for words in SUBCOMMANDS),
    ["config", "check", "--help"],
    ["tasks"],
    ["tsks"],  # a typo: "Did you mean 'tasks'?"
    ["chanels", "--json"],
    ["tasks", "lst"],
    ["nope"],
    ["send"],  # a missing argument
]


@pytest.mark.parametrize("argv", ARGV, ids=" ".join)
def test_what_a_person_sees_is_unchanged(argv: list[str]) -> None:
    runner = CliRunner()
    env = {"COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1"}
    lazy = runner.invoke(cli.app, argv, env=env, prog_name="kernos")
    eager = runner.invoke(eager_app(), argv, env=env, prog_name="kernos")
    assert (lazy.exit_code, lazy.output) == (eager.exit_code, eager.output)
    assert lazy.output.strip()


def test_a_command_loads_its_module_only() -> None:
    probe = (
        "import sys; from kernos import cli; import typer\n"
        "group = typer.main.get_command(cli.app)\n"
        "assert group.get_command(None, 'channels').name == 'channels'\n"
        "assert group.get_command(None, 'nope') is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('kernos.cli.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == str(
        ["kernos.cli._common", "kernos.cli._rich_help", "kernos.cli._table", "kernos.cli.send"]
    )
