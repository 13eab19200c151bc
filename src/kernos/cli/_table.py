"""How the CLI shows data to a person: ages, durations, token counts, aligned tables. Pure.

Every function takes plain values (a "now" is passed in, never read from a clock), so each rule is a
one-line test. Machine-readable output is ``--json`` and never goes through here.
"""

from __future__ import annotations

from collections.abc import Sequence

#: the units an age or a duration is shown in, largest first
_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def duration(seconds: float) -> str:
    """A span as its largest whole unit, with the next unit when it is days or hours.

    ``42s``, ``3m``, ``1h 5m``, ``2d 3h``; negative spans (a clock stepped back) show as ``0s``.
    """
    whole = max(0, int(seconds))
    for index, (unit, size) in enumerate(_UNITS):
        if whole >= size:
            count, rest = divmod(whole, size)
            if unit in ("d", "h"):
                small, small_size = _UNITS[index + 1]
                if rest // small_size:
                    return f"{count}{unit} {rest // small_size}{small}"
            return f"{count}{unit}"
    return "0s"


def age(stamp: float | None, now: float) -> str:
    """How long ago ``stamp`` was: ``just now`` under a second, ``3m ago``, ``-`` when unknown."""
    if stamp is None:
        return "-"
    if now - stamp < 1:
        return "just now"
    return f"{duration(now - stamp)} ago"


def count(value: int | None) -> str:
    """A token count with thousands separators; ``-`` when not reported."""
    return "-" if value is None else f"{value:,}"


def one_line(text: str | None, limit: int = 60) -> str:
    """Text in one table cell: its first line, clipped to ``limit`` characters; ``-`` if empty."""
    first = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    if not first:
        return "-"
    return first if len(first) <= limit else first[: limit - 1] + "…"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A header row and the rows below it, columns left-aligned two spaces apart.

    The last column is not padded (no trailing spaces); a row shorter than the header is padded
    with empty cells.
    """
    width = len(header)
    cells = [list(header), *([*row, *[""] * (width - len(row))][:width] for row in rows)]
    sizes = [max(len(line[i]) for line in cells) for i in range(width)]
    out = []
    for line in cells:
        padded = [cell.ljust(sizes[i]) for i, cell in enumerate(line[:-1])] + [line[-1]]
        out.append("  ".join(padded).rstrip())
    return "\n".join(out)
