"""``kernos compress``: audited semantic compression of prompt files."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernos.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    ConfigOption,
    ModelOption,
    config_errors,
    err,
    fail,
    open_runtime,
    stderr_console,
    write_stdout,
)
from kernos.compress import DEFAULT_MAX_TOKENS, Tokenizer

if TYPE_CHECKING:
    from rich.progress import Progress

    from kernos.compress import FileReport


async def _run_until_signalled(
    run: Callable[..., Awaitable[list[FileReport]]], total: int, progress: Progress | None
) -> tuple[list[FileReport], bool]:
    """Run with SIGINT/SIGTERM aborting sessions in flight; returns (reports, interrupted)."""
    import asyncio
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    bar = progress.add_task("compressing", total=total) if progress is not None else None

    def advance(report: FileReport) -> None:
        if progress is not None and bar is not None:
            progress.advance(bar)

    try:
        reports = await run(stop=stop, on_report=advance)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    return reports, stop.is_set()


def _write_json(path: Path, reports: list[FileReport], model: str) -> bool:
    from kernos.compress import json_report

    document = json.dumps(json_report(reports, model=model), ensure_ascii=False, indent=2)
    try:
        from kernos.compress import atomic_write

        atomic_write(path, document + "\n")
    except OSError as exc:
        err.print(f"error: cannot write the --json report: {exc}", markup=False, highlight=False)
        return False
    return True


def register(app: typer.Typer) -> None:
    @app.command("compress")
    def compress_command(
        files: Annotated[
            list[str],
            typer.Argument(help="Files or globs (* ? [ ] { }, ** recursive, dot-files included)."),
        ],
        out: Annotated[
            Path | None,
            typer.Option("--out", "-o", help="Write the approved text here (one file only)."),
        ] = None,
        in_place: Annotated[
            bool, typer.Option("--in-place", "-i", help="Rewrite each file with its approved text.")
        ] = False,
        force: Annotated[
            bool,
            typer.Option(
                "--force", help="Replace read-only files too (refused by default: `read-only`)."
            ),
        ] = False,
        max_tokens: Annotated[
            int,
            typer.Option(
                "--max-tokens",
                help="Largest source per file, in tokens; a larger file fails before any request.",
            ),
        ] = DEFAULT_MAX_TOKENS,
        rounds: Annotated[int, typer.Option("--rounds", "-r", help="Draft budget per file.")] = 3,
        agents: Annotated[
            int, typer.Option("--agents", "-n", help="Files compressed at once.")
        ] = 4,
        model: ModelOption = None,
        tokenizer: Annotated[
            Tokenizer,
            typer.Option("--tokenizer", help="o200k (exact, offline) or bytes (UTF-8 bytes / 4)."),
        ] = Tokenizer.O200K,
        json_path: Annotated[
            Path | None, typer.Option("--json", help="Write a machine-readable report here.")
        ] = None,
        config: ConfigOption = None,
        record: Annotated[
            Path | None, typer.Option("--record", help="Write the model's turns to a cassette.")
        ] = None,
    ) -> None:
        """Rewrite prompt files into a dense register; only approved drafts are written.

        Each file runs in its own session: the agent drafts with `rewrite` (declaring every loss),
        judges the draft in a review turn, and ends with `approve`. One file, no -i/-o: stdout.
        Read-only files are not replaced without --force; kernos's own temporary files
        (.NAME.*.kernos-tmp) are never targets, and stale ones are removed.
        """
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        from kernos.compress import (
            CompressError,
            Status,
            check_file_count,
            check_options,
            compress_files,
            format_report,
            header,
            resolve_targets,
        )

        try:
            check_options(
                rounds=rounds, agents=agents, in_place=in_place, out=out, max_tokens=max_tokens
            )
            paths = resolve_targets(files)
            check_file_count(len(paths), in_place=in_place)
        except CompressError as exc:
            raise fail(str(exc)) from None
        runtime = open_runtime(config, model, record, store=True)
        try:
            with config_errors():
                name = runtime.model_name("compress", model)
                resolved = runtime.model(name)
            err.print(header(len(paths), name), markup=False, highlight=False)
            progress = (
                Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=stderr_console(),
                    transient=True,
                )
                if err.is_terminal
                else None
            )
            run = functools.partial(
                compress_files,
                paths,
                model=resolved,
                rounds=rounds,
                agents=agents,
                tokenizer=tokenizer,
                in_place=in_place,
                out=out,
                max_tokens=max_tokens,
                force=force,
                store=runtime.store,
            )
            import asyncio

            with progress if progress is not None else contextlib.nullcontext():
                reports, interrupted = asyncio.run(_run_until_signalled(run, len(paths), progress))
        finally:
            runtime.close()
        to_stdout = not in_place and out is None
        err.print(format_report(reports, stdout=to_stdout), markup=False, highlight=False)
        json_failed = json_path is not None and not _write_json(json_path, reports, name)
        if to_stdout and reports and reports[0].status is Status.APPROVED and reports[0].text:
            write_stdout(reports[0].text)
        if interrupted:
            cancelled = sum(r.status is Status.CANCELLED for r in reports)
            err.print(
                f"Interrupted: {cancelled} file(s) cancelled; nothing half-written.",
                markup=False,
                highlight=False,
            )
        approved = all(r.status is Status.APPROVED for r in reports)
        raise typer.Exit(EXIT_OK if approved and not json_failed else EXIT_FAILED)
