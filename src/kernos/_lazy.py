"""Public names of a package imported on first use (PEP 562), so a light command stays light.

A package ``__init__`` imports its public names under ``if typing.TYPE_CHECKING:`` (what type
checkers read, each name written once there) and lists them in ``__all__``; :func:`exports` reads
those imports from the package's own source and builds the module-level ``__getattr__``/``__dir__``
that import each name on first use. ``kernos --help`` or ``kernos tasks list`` then never import
pydantic-ai or the openai SDK, which only the commands that talk to a model need.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path


def checked_imports(source: str) -> dict[str, str]:
    """``name -> module`` of every ``from module import name`` under ``if TYPE_CHECKING:`` (or
    ``typing.TYPE_CHECKING``) at the top level of ``source`` (pure)."""
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.If):
            continue
        test = node.test
        name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
        if name != "TYPE_CHECKING":
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
                for alias in stmt.names:
                    found[alias.asname or alias.name] = stmt.module
    return found


def exports(
    package: str, names: Mapping[str, str] | None = None
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each public name is imported from the module
    its ``TYPE_CHECKING`` import names (or ``names``: public name -> module) on first access,
    then stored in the package's namespace, so later lookups are plain attribute reads and
    ``vars(package)`` shows it."""
    if names is None:
        file = sys.modules[package].__file__
        assert file is not None
        names = checked_imports(Path(file).read_text(encoding="utf-8"))

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
