"""What every command shares: a stderr console, exit codes, and config errors turned into exit 2."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from kernos.runtime import ConfigError, Runtime

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

#: status and progress go to stderr; data goes to stdout
err = Console(stderr=True, highlight=False, soft_wrap=True)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Path to kernos.toml (default: ./kernos.toml)."),
]
ModelOption = Annotated[
    str | None,
    typer.Option("--model", "-m", help="Model string or alias, e.g. openai-chat:gpt-5-mini."),
]

T = TypeVar("T")


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print a one-line error to stderr and return the exit to raise."""
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False)
    return typer.Exit(code)


@contextmanager
def config_errors() -> Iterator[None]:
    """Turn configuration mistakes into one stderr line and exit 2."""
    try:
        yield
    except ConfigError as exc:
        raise fail(str(exc)) from None


def open_runtime(
    config: Path | None, model: str | None = None, record: Path | None = None
) -> Runtime:
    with config_errors():
        return Runtime.open(config, model=model, record=record)


def write_stdout(text: str) -> None:
    """Data on stdout, exactly as given plus one trailing newline."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def guarded(fn: Callable[[], T]) -> T:
    with config_errors():
        return fn()
