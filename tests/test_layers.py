"""No module imports another package's private module (CONTRIBUTING.md, "Where code goes").

A package's ``_private`` modules are its own: ``kernos.runtime._session._session`` may import
``kernos.runtime._session._lean``, and so may ``kernos.runtime.sub._x`` (a subpackage is inside its
parent), but ``kernos.cli.run`` imports ``total`` from ``kernos.runtime``, the package's public
surface (its ``__init__``), never from ``kernos.runtime._session._usage``. The top-level private
modules (``kernos._app``, ``kernos._lazy``...) belong to ``kernos``, which every module is inside.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kernos

SRC = Path(kernos.__file__).parent.parent


def package_of(path: Path) -> str:
    """The package a source file's module lives in (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1])


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package under ``src``."""
    base = SRC.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(tree: ast.Module, package: str) -> list[tuple[int, str]]:
    """``(line, module)`` for every kernos module a source imports, at any depth (inside
    functions and ``TYPE_CHECKING`` too); ``from package import _module`` counts as the module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            found += [
                (node.lineno, f"{base}.{alias.name}")
                for alias in node.names
                if is_module(f"{base}.{alias.name}")
            ]
    return [(line, name) for line, name in found if name.split(".")[0] == "kernos"]


def private_owner(module: str) -> str | None:
    """The package owning the first private part of ``module``'s path, or None if all public."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def is_foreign_private(package: str, module: str) -> bool:
    """Whether code in ``package`` importing ``module`` reaches into another package's privates."""
    owner = private_owner(module)
    return owner is not None and package != owner and not package.startswith(f"{owner}.")


def foreign_private_imports(path: Path) -> list[str]:
    package = package_of(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(SRC)}:{line}: {package} imports {module}"
        for line, module in imported_modules(tree, package)
        if is_foreign_private(package, module)
    ]


def test_no_module_imports_another_packages_private_module() -> None:
    wrong = [hit for path in sorted(SRC.rglob("*.py")) for hit in foreign_private_imports(path)]
    assert not wrong, "import the name from its package instead:\n" + "\n".join(wrong)


def test_the_walk_sees_each_import_form() -> None:
    # the rule's own check: each way of naming another package's private module is caught
    sources = {
        "from kernos.runtime._session._usage import total": True,
        "import kernos.runtime._session._usage": True,
        "from kernos.runtime._session import _usage": True,
        "def f():\n    from kernos.tasks._engine import crash_mode": True,
        "from kernos.runtime import total": False,
        "from kernos.cli._common import fail": False,
        "from kernos import _lazy": False,
        "from kernos.output._channel import Channel": True,
    }
    for source, caught in sources.items():
        modules = [module for _, module in imported_modules(ast.parse(source), "kernos.cli")]
        assert any(is_foreign_private("kernos.cli", m) for m in modules) == caught, source
    # a subpackage is inside its parent: the channels may use the output package's own modules
    assert not is_foreign_private("kernos.output.channels", "kernos.output._channel")
    assert is_foreign_private("kernos.output", "kernos.output.channels._file")


#: a source file past this many lines holds more than one job: split it along its seams
MAX_LINES = 600


def test_no_source_file_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(SRC)): lines
        for path in sorted((SRC / "kernos").rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these along their seams: {long}"
