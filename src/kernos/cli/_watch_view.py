"""How ``kernos tasks watch`` draws the task tree (:func:`kernos.tasks.task_tree`) as text: the
columns, a row's cells, the plain table and the ``--json`` document. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kernos.cli._table import count, duration, one_line, table

if TYPE_CHECKING:
    from kernos.tasks import TreeRow

#: how often the store is checked for changes, in seconds
POLL_SECONDS = 0.5

#: how many transcript lines ``t`` shows
TAIL_LINES = 12

HEADER = ("TASK", "STATUS", "MODEL", "EXECUTOR", "ELAPSED", "IN", "OUT", "COST", "LABEL")

STATUS_STYLE = {
    "pending": "cyan",
    "running": "yellow",
    "waiting": "bold yellow",
    "completed": "green",
    "error": "red",
    "lost": "red",
    "cancelled": "magenta",
    "interrupted": "magenta",
}


def cost_cell(row: TreeRow) -> str:
    """``-`` before any model response, ``unknown`` when a price is not known, else dollars."""
    if not row.requests:
        return "-"
    return "unknown" if row.cost is None else f"${row.cost:.4f}"


def cells(row: TreeRow) -> tuple[str, ...]:
    """A row as the text of each column (the tree drawn by indentation)."""
    tree = "" if row.depth == 0 else "  " * (row.depth - 1) + "└ "
    return (
        tree + row.id,
        row.status or "-",
        row.model or "-",
        row.executor,
        "-" if row.elapsed is None else duration(row.elapsed),
        count(row.input_tokens) if row.requests else "-",
        count(row.output_tokens) if row.requests else "-",
        cost_cell(row),
        one_line(row.label, 60),
    )


def plain(rows: Sequence[TreeRow]) -> str:
    """The snapshot as an aligned text table (what a pipe or a file gets)."""
    if not rows:
        return "(no tasks)"
    return table(HEADER, [cells(row) for row in rows])


def document(rows: Sequence[TreeRow], now: float) -> dict[str, Any]:
    """The snapshot as its ``--json`` document."""
    return {"at": now, "rows": [asdict(row) for row in rows]}
