"""The ``kernos`` command line: one module per command group, each thin.

A command's module is imported when that command runs (or when ``--help`` lists it): ``kernos
tasks list`` loads ``kernos.cli.tasks`` only, ``kernos --version`` none of them.
"""

from __future__ import annotations

import functools
import gc
import importlib
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup
from typer.models import TyperInfo

from kernos import __version__
from kernos.cli import _rich_help
from kernos.runtime import install_log_scrubber

if TYPE_CHECKING:
    from typer import _click

#: every command, in the order ``kernos --help`` lists them, and the module whose ``register``
#: adds it (``send`` adds ``send`` and ``channels``; ``mcp``, ``tasks`` and ``config`` are groups,
#: which typer lists after the plain commands)
COMMANDS = {
    "init": "init",
    "run": "run",
    "chat": "chat",
    "demo": "demo",
    "compress": "compress",
    "send": "send",
    "channels": "send",
    "tools": "tools",
    "usage": "usage",
    "worker": "worker",
    "teams": "teams",
    "approvals": "approvals",
    "approve": "approvals",
    "deny": "approvals",
    "sessions": "sessions",
    "mcp": "mcp",
    "tasks": "tasks",
    "config": "config",
}


install_log_scrubber()  # every log line, whichever logger, loses the secrets kernos knows
_rich_help.install()  # typer's help panels without rich.markdown and rich.traceback
_rich_help.plain_names()  # no <bool>/<str> type tags, PROMPT not {prompt}


class _LazyCommands(MutableMapping[str, "_click.Command"]):
    """A group's commands by name: every name is known, each command is built on first lookup."""

    def __init__(
        self,
        builders: Mapping[str, Callable[[], _click.Command]],
        built: Mapping[str, _click.Command],
    ) -> None:
        self._builders = dict(builders)
        self._built = dict(built)

    def __getitem__(self, name: str) -> _click.Command:
        if name not in self._built:
            self._built[name] = self._builders[name]()  # KeyError: no such command
        return self._built[name]

    def __setitem__(self, name: str, command: _click.Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        self._builders.pop(name, None)
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._builders, *self._built]))

    def __len__(self) -> int:
        return len({*self._builders, *self._built})


def _settings() -> dict[str, Any]:
    """What typer hands from the root app to every command and group it builds."""
    return {
        "pretty_exceptions_short": app.pretty_exceptions_short,
        "rich_markup_mode": app.rich_markup_mode,
    }


@functools.cache
def _builders(module: str) -> dict[str, Callable[[], _click.Command]]:
    """How to build each command ``kernos.cli.<module>`` registers: the module is imported now,
    a command is built (its parameters read) when it is asked for."""
    register = importlib.import_module(f"kernos.cli.{module}").register
    holder = typer.Typer()
    register(holder)
    found: dict[str, Callable[[], _click.Command]] = {}
    for command in holder.registered_commands:
        assert command.callback is not None, "a command needs a callback"
        name = command.name or typer.main.get_command_name(command.callback.__name__)
        found[name] = functools.partial(typer.main.get_command_from_info, command, **_settings())
    for group in holder.registered_groups:
        assert isinstance(group.name, str), "kernos names every command group"
        found[group.name] = functools.partial(_group, group)
    return found


def _group(info: TyperInfo) -> _click.Command:
    """A command group as typer builds it, its commands built when asked for (``kernos tasks
    list`` reads the parameters of ``list`` only)."""
    typer_instance = info.typer_instance
    assert typer_instance is not None
    commands = typer_instance.registered_commands
    # typer builds the group itself (help, callback, options) with no command yet
    typer_instance.registered_commands = []
    try:
        group = typer.main.get_group_from_info(
            info, suggest_commands=app.suggest_commands, **_settings()
        )
    finally:
        typer_instance.registered_commands = commands
    builders = {}
    for command in commands:
        assert command.callback is not None, "a command needs a callback"
        name = command.name or typer.main.get_command_name(command.callback.__name__)
        builders[name] = functools.partial(typer.main.get_command_from_info, command, **_settings())
    group.commands = _LazyCommands(builders, group.commands)
    return group


def _command(module: str, name: str) -> _click.Command:
    return _builders(module)[name]()


class _KernosGroup(TyperGroup):
    """typer's group over :class:`_LazyCommands`: listing the names builds no command."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        builders = {name: functools.partial(_command, m, name) for name, m in COMMANDS.items()}
        self.commands = _LazyCommands(builders, self.commands)

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
        from kernos.cli._common import say_where, set_verbose

        set_verbose(True)
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
    """The ``kernos`` console script: one command, then the process ends (see
    :mod:`kernos.cli._exit` for what it does when something would keep it from ending)."""
    from kernos.cli import _exit

    args = sys.argv[1:]
    code: int | str | None = 0
    try:
        if (
            len(args) == 2
            and args[0] in ("--show-completion", "--install-completion")
            and (args[1] in SHELLS)
        ):
            _completion(args[0], args[1])
            return
        app()
    except SystemExit as exc:
        code = exc.code
        raise
    except BaseException:
        code = 1
        raise
    finally:
        # the command is over, whatever its exit: what it imported and made is left to the OS.
        # Collected again at exit (the interpreter's last collections go through every object
        # of pydantic-ai, the provider SDKs, DBOS), it cost a `kernos run` 0.5 s of its end.
        # Whatever is still open was closed by the command (stores, clients) or is flushed at
        # exit all the same (the streams, the log's handlers)
        gc.freeze()
        _exit.end(code)
