"""The ``kernos`` command line: one module per command group, each thin."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from kernos import __version__
from kernos.cli import compress as _compress
from kernos.cli import config as _config
from kernos.cli import demo as _demo
from kernos.cli import mcp as _mcp
from kernos.cli import run as _run
from kernos.cli import send as _send
from kernos.cli import sessions as _sessions
from kernos.cli import tasks as _tasks
from kernos.cli import tools as _tools
from kernos.cli import usage as _usage
from kernos.cli import worker as _worker
from kernos.runtime import install_log_scrubber

install_log_scrubber()  # every log line, whichever logger, loses the secrets kernos knows

app = typer.Typer(
    name="kernos",
    help="kernos — a small agent kernel: tool calls, sub-agent tasks, output channels, "
    "audited prompt compression.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
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


_run.register(app)
_demo.register(app)
_compress.register(app)
_send.register(app)
_tasks.register(app)
_tools.register(app)
_mcp.register(app)
_usage.register(app)
_worker.register(app)
_sessions.register(app)
_config.register(app)


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
