"""The ``kernos`` command line: one module per command group, each thin.

A command's module is imported when that command runs (or when ``--help`` lists it): ``kernos
tasks list`` loads ``kernos.cli.tasks`` only, ``kernos --version`` none of them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from kernos import __version__
from kernos.cli import _rich_help
from kernos.runtime import install_log_scrubber

if TYPE_CHECKING:
    from typer import _click

#: every command, in the order ``kernos --help`` lists them, and the module whose ``register``
#: adds it (``send`` adds ``send`` and ``channels``; ``tasks`` and ``config`` are groups)
COMMANDS = {
    "run": "run",
    "demo": "demo",
    "compress": "compress",
    "send": "send",
    "channels": "send",
    "tools": "tools",
    "mcp": "mcp",
    "usage": "usage",
    "worker": "worker",
    "sessions": "sessions",
    "tasks": "tasks",
    "config": "config",
}


install_log_scrubber()  # every log line, whichever logger, loses the secrets kernos knows
_rich_help.install()  # typer's help panels without rich.markdown and rich.traceback


class _LazyCommands(MutableMapping[str, "_click.Command"]):
    """The root group's commands: every name is known, a command is built on first lookup (with
    the other commands of its module)."""

    def __init__(
        self,
        modules: Mapping[str, str],
        load: Callable[[str], dict[str, _click.Command]],
        built: Mapping[str, _click.Command],
    ) -> None:
        self._modules = modules
        self._load = load
        self._built = dict(built)

    def __getitem__(self, name: str) -> _click.Command:
        if name not in self._built and name in self._modules:
            for loaded, command in self._load(self._modules[name]).items():
                self._built.setdefault(loaded, command)
        return self._built[name]

    def __setitem__(self, name: str, command: _click.Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._modules, *self._built]))

    def __len__(self) -> int:
        return len({*self._modules, *self._built})


def _load_commands(module: str) -> dict[str, _click.Command]:
    """The click commands ``kernos.cli.<module>`` registers, built with the root app's settings."""
    register = importlib.import_module(f"kernos.cli.{module}").register
    holder = typer.Typer(
        rich_markup_mode=app.rich_markup_mode,
        pretty_exceptions_short=app.pretty_exceptions_short,
        suggest_commands=app.suggest_commands,
    )
    register(holder)
    return dict(typer.main.get_group(holder).commands)


class _KernosGroup(TyperGroup):
    """typer's group over :class:`_LazyCommands`: listing the names builds no command."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _LazyCommands(COMMANDS, _load_commands, self.commands)

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(self.commands)


app = typer.Typer(
    name="kernos",
    help="kernos — a small agent kernel: tool calls, sub-agent tasks, output channels, "
    "audited prompt compression.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    cls=_KernosGroup,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kernos {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Say which store and config are used (on stderr)."),
    ] = False,
) -> None:
    """kernos — run language-model agents with trustworthy tool calls."""
    if verbose:
        from kernos.cli._common import say_where

        say_where()


#: what ``--show-completion SHELL`` / ``--install-completion SHELL`` name (typer's scripts)
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _completion(flag: str, shell: str) -> None:
    """typer's ``--show-completion`` / ``--install-completion`` detect the running shell; given a
    shell name they print or install that shell's script instead."""
    # typer keeps these in a private module (typer.completion re-imports them): pinned by a test
    from typer._completion_shared import get_completion_script, install

    if flag == "--show-completion":
        typer.echo(get_completion_script(prog_name="kernos", complete_var=_COMPLETE, shell=shell))
        return
    shell, path = install(shell=shell, prog_name="kernos", complete_var=_COMPLETE)
    typer.echo(f"{shell} completion installed in {path}; it takes effect in a new terminal")


_COMPLETE = "_KERNOS_COMPLETE"


def main() -> None:
    args = sys.argv[1:]
    if (
        len(args) == 2
        and args[0] in ("--show-completion", "--install-completion")
        and (args[1] in SHELLS)
    ):
        _completion(args[0], args[1])
        return
    app()
