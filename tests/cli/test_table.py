"""The CLI's display rules (``kernos.cli._table``): pure functions, no clock read."""

from __future__ import annotations

import pytest

from kernos.cli._table import age, count, duration, one_line, table


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0s"),
        (-5, "0s"),
        (0.9, "0s"),
        (42, "42s"),
        (60, "1m"),
        (199, "3m"),
        (3600, "1h"),
        (3900, "1h 5m"),
        (86400, "1d"),
        (86400 * 2 + 3 * 3600 + 59, "2d 3h"),
    ],
)
def test_duration_shows_the_largest_unit(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown


def test_age_is_relative_to_the_given_now() -> None:
    assert age(1000.0, 1180.0) == "3m ago"
    assert age(1000.0, 1000.5) == "just now"
    assert age(1000.0, 900.0) == "just now"  # a clock stepped back is not "in the future"
    assert age(None, 1000.0) == "-"


def test_counts_and_cells() -> None:
    assert count(1234567) == "1,234,567"
    assert count(None) == "-"
    assert one_line("first\nsecond") == "first"
    assert one_line("  ") == "-"
    assert one_line(None) == "-"
    assert one_line("x" * 70, 10) == "x" * 9 + "…"


def test_table_aligns_columns_under_a_header_without_trailing_spaces() -> None:
    shown = table(("ID", "STATUS", "LABEL"), [("t_1", "running", "a"), ("t_22", "ok", "")])
    assert shown.splitlines() == [
        "ID    STATUS   LABEL",
        "t_1   running  a",
        "t_22  ok",
    ]
    assert table(("A", "B"), [("x",)]) == "A  B\nx"
