"""What every command shares: a stderr console, exit codes, and config errors turned into exit 2."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from kernos.runtime import Runtime

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


#: status and progress go to stderr; data goes to stdout. Markup is off: most of what is printed is
#: model or user text (``[mail]``, ``deploy [/] done``), which must show as written and never raise
#: ``MarkupError``; kernos styles its own fixed strings with ``rich.text.Text`` or ``markup=True``.
class LazyConsole:
    """A rich ``Console`` made on first use: ``rich.console`` costs ~30 ms to import, which a
    command that prints only data (``kernos tasks list``) never needs."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    @property
    def real(self) -> Console:
        """The console itself, for rich APIs that take one (``Progress(console=...)``)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


_err = LazyConsole(stderr=True, highlight=False, soft_wrap=True, markup=False)
err = cast("Console", _err)


def stderr_console() -> Console:
    """The stderr console as a real ``rich.console.Console`` (made now if it was not yet)."""
    return _err.real


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        metavar="FILE",
        help="The config file (default: kernos.toml here or in the nearest parent with one).",
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option("--model", "-m", help="Model string or alias, e.g. openai-chat:gpt-5-mini."),
]
#: the options of the commands that hold a conversation (``kernos run``, ``kernos chat``)
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No activity on stderr.")]
ContinueOption = Annotated[
    bool, typer.Option("--continue", help="Continue the most recent session of this store.")
]
SessionOption = Annotated[
    str | None,
    typer.Option("--session", help="Continue the session ID (see `kernos sessions`)."),
]
ApproveOption = Annotated[
    list[str] | None,
    typer.Option(
        "--approve",
        metavar="GLOB",
        help="Approve the calls of tools matching GLOB that the permission rules ask about, "
        "children's too (repeatable).",
    ),
]
YesOption = Annotated[
    bool,
    typer.Option("--yes", help="Approve every call the permission rules ask about."),
]

T = TypeVar("T")


class Failure(typer.Exit):
    """An exit that carries its one-line error (as printed, secrets scrubbed), for a command
    that reports errors in its ``--json`` document too (``kernos run --json``)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(code)
        self.message = message


def fail(message: str, code: int = EXIT_USAGE) -> Failure:
    """Print a one-line error to stderr and return the exit to raise."""
    from rich.markup import escape

    from kernos.runtime import scrub_text  # pydantic comes with it; `--help` needs none

    message = scrub_text(message)
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False)
    return Failure(message, code)


@contextmanager
def config_errors() -> Iterator[None]:
    """Turn configuration mistakes into one stderr line and exit 2."""
    from kernos.runtime import ConfigError  # the config's pydantic models; `--help` needs none

    try:
        yield
    except ConfigError as exc:
        raise fail(str(exc)) from None


def open_runtime(
    config: Path | None,
    model: str | None = None,
    record: Path | None = None,
    *,
    store: bool = False,
) -> Runtime:
    """Load the config (and, with ``store``, open the store now) and start the file log.

    A config or state error (a damaged ``kernos.db``, a ``.kernos`` that is a file) is one line on
    stderr and exit 2; the store opens before the log so a broken home gives one message, not two.
    """
    from kernos.runtime import Runtime

    with config_errors():
        runtime = Runtime.open(config, model=model, record=record)
        if store:
            runtime.store  # noqa: B018 (opened now so its errors come before anything runs)
    enable_file_log(runtime.home)
    return runtime


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _PrivateLog(logging.FileHandler):
    """``kernos.log``, created ``0600``; a write that fails turns the file log off with one
    warning instead of a traceback per record."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8", delay=False)

    def _open(self) -> io.TextIOWrapper:
        stream = open(  # noqa: SIM115 (the handler owns and closes it)
            self.baseFilename, "a", encoding=self.encoding, errors=self.errors, opener=_private
        )
        with contextlib.suppress(OSError):  # an older, readable log is made private
            if stat.S_IMODE(os.fstat(stream.fileno()).st_mode) & 0o077:
                os.fchmod(stream.fileno(), 0o600)
        return stream

    def handleError(self, record: logging.LogRecord) -> None:
        logging.getLogger("kernos").removeHandler(self)
        _no_file_log(Path(self.baseFilename), sys.exc_info()[1])
        with contextlib.suppress(Exception):
            self.close()


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def _no_file_log(path: Path, exc: BaseException | None) -> None:
    reason = getattr(exc, "strerror", None) or str(exc)
    err.print(
        f"warning: cannot write the log file {path} ({reason}); continuing without it. Make "
        "the directory writable or set KERNOS_HOME to one that is.",
        markup=False,
    )


def enable_file_log(home: Path) -> Path | None:
    """Send kernos' own log records (INFO and up) to ``HOME/kernos.log``, once per process.

    The log is for people reading what happened later (an ignored task transition, a failing
    ``after_output`` hook); the terminal keeps only the command's own status lines. A log that
    cannot be opened or written turns file logging off with one warning on stderr; the command
    itself goes on.
    """
    logger = logging.getLogger("kernos")
    path = home / "kernos.log"
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename) == path:
            return path
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        handler = _PrivateLog(path)
    except OSError as exc:
        _no_file_log(path, exc)
        return None
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return path


def write_stdout(text: str) -> None:
    """Data on stdout, exactly as given plus one trailing newline.

    Text is cleaned at the runtime boundary already; this is the last line of defence: a character
    stdout cannot encode is replaced rather than crashing the command after its work is done.
    """
    data = text if text.endswith("\n") else text + "\n"
    try:
        data.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only then load the boundary's cleaner
        from kernos.boundary import clean_text

        data = clean_text(data)
    write_raw(data)


def write_raw(text: str) -> None:
    """``text`` on stdout as it is (streamed pieces), flushed; a character stdout cannot encode
    is replaced, never a crash."""
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        sys.stdout.write(text.encode(encoding, errors="replace").decode(encoding))
    sys.stdout.flush()


#: whether this command runs under ``kernos -v`` (set by the root option's callback)
_verbose = False


def set_verbose(value: bool) -> None:
    global _verbose
    _verbose = value


def verbose() -> bool:
    """Whether the command runs under ``kernos -v`` (the root option)."""
    return _verbose


def say_where(cwd: Path | None = None) -> None:
    """``-v``: one stderr line naming the store and the default config, and why those (a
    PostgreSQL store is shown without its password)."""
    from kernos.runtime import display_url, kernos_home, peek_store_url, project_root, scrub_text

    root = project_root(cwd)
    home = kernos_home(cwd)
    if os.environ.get("KERNOS_HOME"):
        why = "KERNOS_HOME"
    elif root != (cwd or Path.cwd()).absolute():
        why = f"found in {root}"
    else:
        why = "the working directory" + ("" if home.exists() else "; created on first use")
    config = root / "kernos.toml"
    shown = str(config) if config.is_file() else f"none ({config} does not exist)"
    store = f"{home / 'kernos.db'} ({why})"
    if (url := peek_store_url(root)) is not None:
        store = f"{display_url(url[0])} (PostgreSQL, {url[1]})"
    err.print(scrub_text(f"store: {store}; config: {shown}"), markup=False)


def guarded(fn: Callable[[], T]) -> T:
    with config_errors():
        return fn()
