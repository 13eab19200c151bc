"""One error tree: every public exception kernos defines is a :class:`kernos.errors.KernosError`,
and the older import paths name the same classes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest
import typer

import kernos
from kernos import errors
from kernos.errors import ConfigError, KernosError, RunStopped, ToolError


def _modules() -> list[str]:
    return [
        info.name
        for info in pkgutil.walk_packages(kernos.__path__, "kernos.")
        if not info.name.startswith("kernos.__main__")
    ]


def test_every_public_exception_of_kernos_is_in_the_tree() -> None:
    outside = []
    for name in _modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("kernos")
                and value.__module__ == name
                and not attr.startswith("_")
                and not issubclass(value, KernosError)
                # how a command ends with its exit code (typer's), not an error for callers
                and not issubclass(value, typer.Exit)
            ):
                outside.append(f"{name}.{attr}")
    assert outside == []


def test_the_tree_drawn_in_the_docstring_is_the_tree() -> None:
    """Each class sits under its base in the drawing, and every class of the module is drawn."""
    drawn: dict[str, str | None] = {}
    parents: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        found = re.match(r"^    ((?:[│ ]   )*)(?:[├└]── )?([A-Z]\w+)\s{2,}", line)
        if found is None:
            continue
        depth = len(found.group(1)) // 4 + (1 if "──" in line else 0)
        parents[depth:] = [found.group(2)]
        drawn[found.group(2)] = parents[depth - 1] if depth else None
    defined = {
        name: value
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, BaseException)
    }
    assert set(drawn) == set(defined) == set(errors.__all__) - {"NO_MODEL_MESSAGE"}
    for name, parent in drawn.items():
        if parent is not None:
            assert defined[parent] in defined[name].__bases__, (name, parent)


@pytest.mark.parametrize(
    ("old", "name", "family"),
    [
        ("kernos.boundary", "ToolError", ToolError),
        ("kernos.boundary", "PatternTooComplex", ToolError),
        ("kernos.runtime", "ConfigError", ConfigError),
        ("kernos.runtime", "StoreError", ConfigError),
        ("kernos.runtime", "NoModelError", ConfigError),
        ("kernos.runtime", "BudgetExceeded", RunStopped),
        ("kernos.runtime", "WorkspaceRefused", ToolError),
        ("kernos.runtime", "NotRegularFile", KernosError),
        ("kernos.runtime._models._cassette", "CassetteError", KernosError),
        ("kernos.output", "ChannelError", ToolError),
        ("kernos.output", "OutputBlocked", ToolError),
        ("kernos.output", "OutputArgumentError", ToolError),
        ("kernos.compress", "CompressError", ToolError),
        ("kernos.tools", "PathRefused", ToolError),
        ("kernos.tools._mcp", "McpServerError", ConfigError),
        ("kernos._app", "Interrupted", RunStopped),
        ("kernos.cli.run", "RunTimedOut", RunStopped),
    ],
)
def test_the_older_import_paths_name_the_same_classes(
    old: str, name: str, family: type[KernosError]
) -> None:
    cls = getattr(importlib.import_module(old), name)
    assert cls is getattr(errors, name)
    assert issubclass(cls, family)


def test_a_refusal_is_a_coded_tool_error_with_its_sentence() -> None:
    from kernos.output import ChannelError, OutputBlocked
    from kernos.runtime import WorkspaceRefused

    refused = WorkspaceRefused("attachment refused: /etc/passwd is outside the workspace")
    assert (refused.code, str(refused)) == (
        "path_refused",
        "attachment refused: /etc/passwd is outside the workspace",
    )
    assert (ChannelError("no such chat").code, str(ChannelError("no such chat"))) == (
        "channel_failed",
        "no such chat",
    )
    blocked = OutputBlocked("contains a secret")
    assert (blocked.code, blocked.reason, str(blocked)) == (
        "blocked",
        "contains a secret",
        "contains a secret",
    )
