"""Every exported name has a user: a package's ``__all__`` lists only what some other module, a
test, a bench, the docs or the README names (the surface does not grow with names nothing
uses; the names the specs promise are in tests/test_public_api.py's ``SPEC_NAMES``)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import kernos
from tests.test_public_api import PACKAGES

ROOT = Path(kernos.__file__).parent.parent.parent
THIS = Path(__file__).name  # its own list below is no use
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _words() -> dict[Path, set[str]]:
    found = {}
    for top in ("src", "tests", "bench", "docs"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix in (".py", ".md") and path.is_file() and path.name != THIS:
                found[path.resolve()] = set(WORD.findall(path.read_text(encoding="utf-8")))
    for name in ("README.md", "pyproject.toml"):  # pyproject: the entry points
        path = ROOT / name
        found[path.resolve()] = set(WORD.findall(path.read_text(encoding="utf-8")))
    return found


WORDS = _words()
#: named nowhere else, kept on purpose: the types public functions return
#: (``normalized()``'s toolset, ``mcp_status()``'s rows), for a program's annotations
NOT_YET = {
    "kernos.runtime": ["NormalizedToolset"],
    "kernos.tools": ["McpServerStatus"],
}


def unused(package: str, words: dict[Path, set[str]]) -> list[str]:
    """The names of ``package.__all__`` no file names but the package's ``__init__`` and the
    module that defines the name."""
    module = importlib.import_module(package)
    init = Path(module.__file__ or "").resolve()
    found = []
    for name in module.__all__:
        home = getattr(getattr(module, name), "__module__", None)
        own = {init}
        spec = importlib.util.find_spec(home) if isinstance(home, str) else None
        if spec is not None and spec.origin:
            own.add(Path(spec.origin).resolve())
        if not any(name in names for path, names in words.items() if path not in own):
            found.append(name)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_is_used(package: str) -> None:
    assert unused(package, WORDS) == NOT_YET.get(package, [])


def test_an_unused_export_is_seen() -> None:
    # the check itself: a name only the package and its own module know is reported
    words = {path: names - {"render_event"} for path, names in WORDS.items()}
    assert "render_event" in unused("kernos.tasks", words)
