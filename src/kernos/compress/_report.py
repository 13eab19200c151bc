"""The human report on stderr and the ``--json`` report. Pure rendering."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernos.compress._loop import FileReport
from kernos.compress._protocol import format_percent, shrink_ratio
from kernos.compress._session import Status
from kernos.compress._targets import display_path

LOSS_WIDTH = 200


def header(count: int, model: str) -> str:
    return f"Compressing {count} file(s) with {model}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str, width: int = LOSS_WIDTH) -> str:
    flat = _one_line(text)
    return flat if len(flat) <= width else flat[:width] + "…"


def file_lines(report: FileReport, *, stdout: bool = False, cwd: Path | None = None) -> list[str]:
    """One file's lines: status and sizes, each loss, and what was written."""
    m = report.metrics
    sizes = (
        f"{m.source_tokens} → {m.draft_tokens} tok ({m.percent}%)"
        if m
        else f"{report.source_tokens} → - tok (-)"
    )
    lines = [
        f"  {display_path(report.path, cwd)}: {report.status.value}, {sizes}, "
        f"{report.rounds} draft(s), {len(report.losses)} loss(es)"
    ]
    for loss in report.losses:
        lines.append(f"    - {_cut(loss.content)}")
        lines.append(f"      {_one_line(loss.reason)}")
    if report.output is not None:
        lines.append(f"      wrote {display_path(report.output, cwd)}")
    elif report.status is Status.APPROVED and stdout:
        lines.append("      wrote stdout")
    elif report.error:
        lines.append(f"      nothing written: {report.error}")
    else:
        lines.append("      nothing written")
    return lines


def summary(reports: Sequence[FileReport]) -> str:
    """``Approved A/N: S → D tokens (P% smaller)`` over the approved files."""
    approved = [r for r in reports if r.status is Status.APPROVED and r.metrics]
    source = sum(r.metrics.source_tokens for r in approved if r.metrics)
    draft = sum(r.metrics.draft_tokens for r in approved if r.metrics)
    return (
        f"Approved {len(approved)}/{len(reports)}: {source} → {draft} tokens "
        f"({format_percent(shrink_ratio(source, draft))}% smaller)"
    )


def format_report(
    reports: Sequence[FileReport], *, stdout: bool = False, cwd: Path | None = None
) -> str:
    """The stderr report: every file's lines, then the summary when there is more than one file.

    Args:
        reports: as returned by :func:`compress_files`.
        stdout: the approved text went to stdout (one file, no ``-i``/``-o``).
        cwd: paths inside it are shown relative to it (default: the working directory).
    """
    lines = [line for report in reports for line in file_lines(report, stdout=stdout, cwd=cwd)]
    if len(reports) > 1:
        lines.append(summary(reports))
    return "\n".join(lines)


def tool_report(report: FileReport) -> str:
    """One file's report as the ``compress`` tool's result (what ``kernos mcp`` answers a host's
    model): status, sizes, each declared loss, and what was written."""
    lines = [f"compress {report.path}: {report.status.value} after {report.rounds} round(s)"]
    m = report.metrics
    if m is not None:
        lines.append(
            f"metrics: {m.source_tokens} → {m.draft_tokens} tokens, "
            f"{m.source_words} → {m.draft_words} words ({m.percent}% smaller)"
        )
    if report.losses:
        lines.append("declared losses:")
        lines += [f"- {loss.content} ({loss.reason})" for loss in report.losses]
    else:
        lines.append("declared losses: none")
    if report.output is not None:
        lines.append(f"written: {report.output}")
    else:
        lines.append(f"written: nothing ({report.error or 'no approved draft'})")
    return "\n".join(lines)


def json_report(reports: Sequence[FileReport], *, model: str) -> dict[str, Any]:
    """The ``--json`` document: the model, counts, and one entry per file."""
    return {
        "model": model,
        "files": [r.to_json() for r in reports],
        "approved": sum(r.status is Status.APPROVED for r in reports),
        "total": len(reports),
    }
