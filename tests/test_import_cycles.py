"""Import cycles among kernos modules, counting every import: at the top, inside functions and
under ``TYPE_CHECKING`` (a function-local import that hides a cycle means a module
is in the wrong place).

A package whose ``__init__`` exports its names lazily (``kernos._lazy``) is a pass-through: an
import of one of its names is an import of the module its ``TYPE_CHECKING`` import names. Run
this file to list every cycle left::

    PYTHONPATH=src .venv/bin/python tests/test_import_cycles.py

The test keeps the cycles removed so far removed; pyproject.toml's import-linter contracts lock
the same at the package level (``make test`` runs ``lint-imports``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import kernos
from kernos._lazy import checked_imports

SRC = Path(kernos.__file__).parent.parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _lazy_names() -> dict[str, dict[str, str]]:
    """``package -> {name -> module}`` for each package ``__init__`` that exports lazily."""
    found = {}
    for path in SRC.rglob("__init__.py"):
        names = checked_imports(path.read_text(encoding="utf-8"))
        if names:
            found[module_name(path)] = names
    return found


def graph() -> dict[str, set[str]]:
    """``module -> the kernos modules it imports`` (a lazy package's ``__init__`` left out)."""
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
    lazy = _lazy_names()
    edges: dict[str, set[str]] = {name: set() for name in modules if name not in lazy}
    for name, path in modules.items():
        if name in lazy:
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        targets.append(f"{base}.{alias.name}")
                    elif base in lazy and alias.name in lazy[base]:
                        targets.append(lazy[base][alias.name])
                    else:
                        targets.append(base)
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target in edges and target != name:
                    edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def path_between(edges: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """The shortest import chain from ``start`` to ``goal`` (breadth first), or ``None``."""
    seen = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(edges[node]):
                if nxt not in seen:
                    seen[nxt] = [*seen[node], nxt]
                    if nxt == goal:
                        return seen[nxt]
                    following.append(nxt)
        frontier = following
    return None


#: module pairs that once imported each other (directly or around a chain) and must not again
REMOVED = [
    ("kernos.tasks._scheduler", "kernos.tasks._engine"),
    ("kernos.tasks._scheduler", "kernos.tasks._dbos"),
    ("kernos.tasks._engine", "kernos.tasks._dbos"),
    ("kernos.tasks._manager", "kernos.tasks._tools"),
    ("kernos.tasks._manager", "kernos.tasks._teams"),
    ("kernos.tasks._manager", "kernos.tasks._scheduler"),
    ("kernos.tasks._manager", "kernos.tasks._children"),
    ("kernos.tasks._dbos._engine", "kernos.tasks._dbos._workflow"),
    ("kernos.runtime._config._config", "kernos.runtime._config._windows"),
    # the loop, its toolset, compaction and approval meet the session through a port
    ("kernos.runtime._session._session", "kernos.runtime._session._lean"),
    ("kernos.runtime._session._session", "kernos.runtime._session._toolset"),
    ("kernos.runtime._session._session", "kernos.runtime._session._compacting"),
    ("kernos.runtime._session._session", "kernos.runtime._approval._approval"),
    # the response cleaning under the models no longer needs the toolset
    ("kernos.runtime._models._clean", "kernos.runtime._session._toolset"),
    ("kernos.runtime._models._cassette", "kernos.runtime._models._lean_models"),
    ("kernos.runtime._models._model_adapter", "kernos.runtime._session._lean"),
    # the compaction store migrates its own table: the store never imports it
    ("kernos.runtime._store._store", "kernos.runtime._session._compaction_store"),
]


def test_removed_cycles_stay_removed() -> None:
    edges = graph()
    back = [
        (a, b, path_between(edges, a, b), path_between(edges, b, a))
        for a, b in REMOVED
        if path_between(edges, a, b) and path_between(edges, b, a)
    ]
    assert back == []


def test_the_graph_sees_each_import_form() -> None:
    edges = graph()
    # a TYPE_CHECKING import, a function-level import and a lazy package name all count
    assert "kernos.tasks._store" in edges["kernos.tasks._engine"]  # top level
    assert "kernos.tasks._dbos" in edges["kernos.tasks._scheduler"]  # inside make_engine
    # `from kernos.runtime import Config`
    assert "kernos.runtime._config._config" in edges["kernos.tasks._engine"]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


if __name__ == "__main__":
    found = graph()
    for component in cycles(found):
        print(f"{len(component)} modules: " + ", ".join(component))
        for a in component:
            for b in sorted(found[a] & set(component)):
                print(f"    {a} -> {b}")
