"""The ``compress`` tool's result text (``kernos mcp``) comes from the compress package's report
module, like the CLI's stderr report and ``--json``."""

from __future__ import annotations

from pathlib import Path

from kernos.compress import FileReport, Loss, Status, tool_report


def test_a_file_with_nothing_approved_says_why_nothing_was_written() -> None:
    report = FileReport(Path("/w/p.md"), Status.STALLED, error="the model stopped without a draft")
    assert tool_report(report).splitlines() == [
        "compress /w/p.md: stalled after 0 round(s)",
        "declared losses: none",
        "written: nothing (the model stopped without a draft)",
    ]


def test_each_declared_loss_is_listed() -> None:
    report = FileReport(
        Path("/w/p.md"), Status.UNAPPROVED, rounds=2, losses=(Loss("Please", "politeness"),)
    )
    assert tool_report(report).splitlines() == [
        "compress /w/p.md: unapproved after 2 round(s)",
        "declared losses:",
        "- Please (politeness)",
        "written: nothing (no approved draft)",
    ]
