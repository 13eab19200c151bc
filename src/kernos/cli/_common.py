"""What every command shares: a stderr console, exit codes, and config errors turned into exit 2."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from kernos.runtime import Runtime

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
    from kernos.runtime import ConfigError  # the config's pydantic models; `--help` needs none

    try:
        yield
    except ConfigError as exc:
        raise fail(str(exc)) from None


def open_runtime(
    config: Path | None, model: str | None = None, record: Path | None = None
) -> Runtime:
    from kernos.runtime import Runtime

    with config_errors():
        runtime = Runtime.open(config, model=model, record=record)
    enable_file_log(runtime.home)
    return runtime


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def enable_file_log(home: Path) -> Path | None:
    """Send kernos' own log records (INFO and up) to ``HOME/kernos.log``, once per process.

    The log is for people reading what happened later (an ignored task transition, a failing
    ``after_output`` hook); the terminal keeps only the command's own status lines. A home that
    cannot be written leaves logging as it was rather than failing the command.
    """
    logger = logging.getLogger("kernos")
    path = home / "kernos.log"
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename) == path:
            return path
    try:
        home.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    except OSError:
        return None
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return path


def write_stdout(text: str) -> None:
    """Data on stdout, exactly as given plus one trailing newline."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def guarded(fn: Callable[[], T]) -> T:
    with config_errors():
        return fn()
