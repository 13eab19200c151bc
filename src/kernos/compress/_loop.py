"""``compress_files``: every file in its own session, at most ``agents`` at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_ai.models import Model

from kernos.compress._protocol import CompressError, CompressProtocol, Loss, Metrics
from kernos.compress._session import Status, outcome, run_session
from kernos.compress._targets import display_path
from kernos.compress._tokens import DEFAULT_MAX_TOKENS, Tokenizer, token_counter
from kernos.compress._write import (
    atomic_write,
    is_read_only,
    remove_stale_temp_files,
    with_trailing_newline,
)
from kernos.runtime import ModelTarget, Runtime, Store, model_failure, scrub_text

INTERRUPTED = "interrupted before it finished"
NOT_STARTED = "interrupted before it started"
MAX_BYTES_PER_TOKEN = 256
"""A source over ``max_tokens * MAX_BYTES_PER_TOKEN`` bytes is refused without being read (no
tokenizer packs that many bytes into one token), so a 50 MB file is never loaded to count it."""


def read_only_error(path: Path) -> str:
    return f"read-only: {path} is not writable; make it writable, or pass --force to replace it"


def too_large_error(size: str, max_tokens: int) -> str:
    return (
        f"too large: {size}, over --max-tokens {max_tokens}; split the file or raise --max-tokens"
    )


@dataclass(frozen=True)
class FileReport:
    """What happened to one file.

    Attributes:
        path: the source file (absolute).
        status: ``approved``, ``unapproved``, ``stalled`` or ``cancelled``.
        rounds: how many drafts the agent submitted.
        source_words: the source's size in words.
        source_tokens: the source's size in tokens.
        metrics: the newest draft measured against the source (``None`` without a draft).
        losses: the newest draft's declared losses.
        verdict: the approval's verdict.
        text: the approved text, as written (with its trailing newline); ``None`` unless approved.
        output: where the text was written (``None``: not written to a file).
        error: why the file was not approved, in one sentence.
    """

    path: Path
    status: Status
    rounds: int = 0
    source_words: int = 0
    source_tokens: int = 0
    metrics: Metrics | None = None
    losses: tuple[Loss, ...] = ()
    verdict: str | None = None
    text: str | None = None
    output: Path | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The machine-readable form used by ``--json``."""
        m = self.metrics
        return {
            "path": str(self.path),
            "status": self.status.value,
            "rounds": self.rounds,
            "metrics": {
                "source_words": m.source_words if m else self.source_words,
                "draft_words": m.draft_words if m else None,
                "source_tokens": m.source_tokens if m else self.source_tokens,
                "draft_tokens": m.draft_tokens if m else None,
                "ratio": round(m.ratio, 6) if m else None,
            },
            "losses": [{"content": x.content, "reason": x.reason} for x in self.losses],
            "verdict": self.verdict,
            "output": str(self.output) if self.output else None,
            "error": self.error,
        }


def _report(
    path: Path,
    protocol: CompressProtocol | None,
    status: Status,
    error: str | None,
    *,
    output: Path | None = None,
) -> FileReport:
    if error:
        error = scrub_text(error)  # a provider's error body may echo the key: never report it
    if protocol is None:
        return FileReport(path, status, error=error)
    draft = protocol.latest
    approved = status is Status.APPROVED and draft is not None
    return FileReport(
        path=path,
        status=status,
        rounds=protocol.rounds,
        source_words=protocol.source_words,
        source_tokens=protocol.source_tokens,
        metrics=protocol.metrics(draft) if draft else None,
        losses=draft.losses if draft else (),
        verdict=protocol.verdict,
        text=with_trailing_newline(draft.text) if approved and draft else None,
        output=output,
        error=error,
    )


def _read(path: Path, max_tokens: int) -> str:
    size = path.stat().st_size
    if size > max_tokens * MAX_BYTES_PER_TOKEN:
        raise _Refused(too_large_error(f"{size} bytes", max_tokens))
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise OSError(f"cannot read {path}: it is not UTF-8 text") from None


class _Refused(Exception):
    """A file refused before any request (read-only destination, over ``--max-tokens``)."""


async def _write(destination: Path, text: str, source: Path) -> Path:
    """The atomic write, in a thread so its fsync never stalls the other sessions.

    An interrupt cannot stop a replace already under way in the thread; it is awaited to the end
    so the report says truthfully that the file was written.
    """
    job = asyncio.ensure_future(
        asyncio.to_thread(atomic_write, destination, text, mode_from=source)
    )
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        return await job


async def _compress_path(
    path: Path,
    model: Model,
    *,
    label: str,
    rounds: int,
    count: Callable[[str], int],
    destination: Path | None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    force: bool = False,
    store: Store | None = None,
) -> FileReport:
    protocol: CompressProtocol | None = None
    try:
        if destination is not None and not force and is_read_only(destination):
            return _report(path, None, Status.CANCELLED, read_only_error(destination))
        source = _read(path, max_tokens)
        protocol = CompressProtocol(source, tokenizer=count)
        if not source.strip():
            return _report(path, protocol, Status.STALLED, "no text to compress")
        if protocol.source_tokens > max_tokens:
            too_large = too_large_error(f"{protocol.source_tokens} tokens", max_tokens)
            return _report(path, protocol, Status.CANCELLED, too_large)
        await run_session(protocol, model, label, rounds, store)
        status, error = outcome(protocol, rounds)
        if status is not Status.APPROVED or destination is None:
            return _report(path, protocol, status, error)
        draft = protocol.latest
        assert draft is not None
        if not force and is_read_only(destination):  # it may have changed during the session
            return _report(path, protocol, Status.CANCELLED, read_only_error(destination))
        written = await _write(destination, with_trailing_newline(draft.text), path)
        return _report(path, protocol, status, None, output=written)
    except asyncio.CancelledError:
        return _report(path, protocol, Status.CANCELLED, INTERRUPTED)
    except _Refused as exc:
        return _report(path, protocol, Status.CANCELLED, str(exc))
    except OSError as exc:
        return _report(path, protocol, Status.CANCELLED, str(exc) or type(exc).__name__)
    except Exception as exc:  # a provider error fails this file, never the others
        failure = model_failure(exc, ModelTarget(model.model_name, model.base_url))
        said = failure.line if failure is not None else f"{type(exc).__name__}: {exc}"
        return _report(path, protocol, Status.CANCELLED, said)


async def compress_files(
    paths: Sequence[Path | str],
    *,
    model: Model | str | None = None,
    runtime: Runtime | None = None,
    rounds: int = 3,
    agents: int = 4,
    tokenizer: Tokenizer | str = Tokenizer.O200K,
    in_place: bool = False,
    out: Path | str | None = None,
    stop: asyncio.Event | None = None,
    on_report: Callable[[FileReport], None] | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    force: bool = False,
    store: Store | None = None,
) -> list[FileReport]:
    """Compress each file in its own isolated session, at most ``agents`` at a time.

    Only approved drafts are written: over each source with ``in_place``, to ``out`` (one file),
    or nowhere (the approved text is in :attr:`FileReport.text`, for stdout). One failing file
    never stops the others. Setting ``stop`` aborts sessions in flight and cancels files not yet
    started; no file is ever half-written. Before any session, stale temporary files an earlier
    interrupted run left next to the sources or ``out`` are removed (see ``_write.py`` for the
    rule). A file is ``cancelled`` before any request when its destination is read-only (unless
    ``force``) or its source is over ``max_tokens``.

    Args:
        paths: the files (see :func:`resolve_targets` for globs).
        model: a pydantic-ai model, or a model string/alias resolved through ``runtime``
            (default: ``runtime.model_name("compress")``: ``KERNOS_MODEL``, then
            ``default_model``).
        runtime: where model strings are resolved (default: ``Runtime.open()`` on ./kernos.toml).
        rounds: the draft budget per file (review turns at most).
        agents: how many files run at once.
        tokenizer: ``o200k`` (exact, offline) or ``bytes`` (ceil(UTF-8 bytes / 4)).
        in_place: rewrite each source file.
        out: write the single file's approved text here.
        stop: set it to interrupt the run.
        on_report: called as each file finishes (for progress bars).
        max_tokens: the largest source, in tokens, sent to the model (default 100,000).
        force: replace read-only destinations too.
        store: where each model response is recorded as a usage row (agent ``compress``;
            ``kernos usage`` reads them); the sessions' turns are not stored. ``None``: nowhere.

    Returns:
        One report per path, in the order given.

    Raises:
        CompressError: ``rounds``, ``agents`` or ``max_tokens`` below 1, both ``in_place`` and
            ``out``, or ``out`` with several paths (the CLI's exact usage messages).
        kernos.runtime.ConfigError: no model configured, or a bad model string.
    """
    check_options(rounds=rounds, agents=agents, in_place=in_place, out=out, max_tokens=max_tokens)
    files = [Path(p).absolute() for p in paths]
    if out is not None:
        check_file_count(len(files), in_place=False)
    remove_stale_temp_files(
        {p.parent for p in files} | ({Path(out).absolute().parent} if out else set())
    )
    count = token_counter(tokenizer)
    if not isinstance(model, Model):
        owned = runtime is None
        runtime = runtime or Runtime.open()
        try:
            model = runtime.model(runtime.model_name("compress", model))
        finally:
            if owned:
                runtime.close()
    resolved: Model = model
    gate = asyncio.Semaphore(agents)
    reports: list[FileReport | None] = [None] * len(files)

    async def one(index: int, path: Path) -> None:
        destination = path if in_place else (Path(out) if out is not None else None)
        try:
            async with gate:
                report = await _compress_path(
                    path,
                    resolved,
                    label=display_path(path),
                    rounds=rounds,
                    count=count,
                    destination=destination,
                    max_tokens=max_tokens,
                    force=force,
                    store=store,
                )
        except asyncio.CancelledError:
            report = _report(path, None, Status.CANCELLED, NOT_STARTED)
        reports[index] = report
        if on_report is not None:
            on_report(report)

    tasks = [asyncio.create_task(one(i, p)) for i, p in enumerate(files)]
    waiter = asyncio.create_task(stop.wait()) if stop is not None else None
    try:
        pending: set[asyncio.Future[Any]] = set(tasks)
        while pending:
            watched = pending | ({waiter} if waiter else set())
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            pending -= done
            if waiter is not None and waiter in done:
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                break
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        if waiter is not None:
            waiter.cancel()
    return [
        report if report is not None else _report(files[i], None, Status.CANCELLED, NOT_STARTED)
        for i, report in enumerate(reports)
    ]


def check_options(
    *, rounds: int, agents: int, in_place: bool, out: object, max_tokens: int = 1
) -> None:
    """The option checks that come before targets are resolved, in the spec's order.

    Raises:
        CompressError: the first check that fails.
    """
    if rounds < 1:
        raise CompressError("--rounds must be a positive integer")
    if agents < 1:
        raise CompressError("--agents must be a positive integer")
    if max_tokens < 1:
        raise CompressError("--max-tokens must be a positive integer")
    if in_place and out is not None:
        raise CompressError("--in-place and --out are mutually exclusive")


def check_file_count(count: int, *, in_place: bool) -> None:
    """Several files need ``--in-place``: ``--out`` and stdout take a single file.

    Raises:
        CompressError: more than one file without ``in_place``.
    """
    if count > 1 and not in_place:
        raise CompressError(
            f"{count} files matched; pass --in-place to rewrite them (--out takes a single file)"
        )
