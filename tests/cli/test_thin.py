"""``cli/`` holds no SQL: a command reads the store through its subsystem's methods
(:class:`kernos.tasks.TaskStore`, :mod:`kernos.runtime`), so a table's queries live beside
its schema."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import kernos

CLI = Path(kernos.__file__).parent / "cli"
SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP)\b", re.IGNORECASE)
#: files allowed SQL for now: none
NOT_YET: set[str] = set()


def sql_in(source: str) -> list[int]:
    """Lines of ``source`` holding an SQL statement or a ``.query`` / ``.execute`` call."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if SQL.match(node.value):
                found.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("query", "execute", "executemany")
        ):
            found.append(node.lineno)
    return found


def test_no_cli_module_holds_sql() -> None:
    wrong = [
        f"cli/{path.name}:{line}"
        for path in sorted(CLI.glob("*.py"))
        if path.name not in NOT_YET
        for line in sql_in(path.read_text(encoding="utf-8"))
    ]
    assert wrong == [], "read through a store method instead"


def test_the_check_sees_sql() -> None:
    assert sql_in('rows = store.query("SELECT * FROM usage")') == [1, 1]
    assert sql_in('x = ("SELECT u.*, t.id FROM usage u"\n " WHERE 1")') == [1]
    assert sql_in('print("selected 3 rows")') == []
