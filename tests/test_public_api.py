"""Every package exposes a small, sorted, complete public surface (CONTRIBUTING.md)."""

from __future__ import annotations

import importlib
import inspect

import pytest

PACKAGES = [
    "kernos.boundary",
    "kernos.runtime",
    "kernos.testing",
    "kernos.tasks",
    "kernos.output",
    "kernos.output.channels",
    "kernos.compress",
    "kernos.tools",
]

#: names the specs promise to external tests
SPEC_NAMES = {
    "kernos.boundary": [
        "ToolSpec",
        "ToolError",
        "ToolResult",
        "call_tool",
        "non_blank_text",
        "identifier",
        "string_list",
        "boolean_flag",
        "is_padding_word",
    ],
    "kernos.tasks": [
        "normalize_task_arguments",
        "resolve_spawn_items",
        "resolve_run_in_background",
        "clamp_task_summary",
        "build_task_description",
        "TaskManager",
    ],
    "kernos.output": [
        "parse_output_items",
        "OutputItem",
        "OutputArgumentError",
        "OutputKernel",
        "Channel",
        "ChannelError",
    ],
    "kernos.compress": [
        "CompressProtocol",
        "CompressError",
        "Loss",
        "Draft",
        "Metrics",
        "resolve_targets",
        "compress_files",
    ],
}


def isort_key(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions."""
    if name.isupper():
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=isort_key), f"{name}.__all__ is not sorted"
    # dir() rather than vars(): a package that imports its names on first use (kernos._lazy)
    # lists them in __dir__, and getattr() imports each one, so a name that fails to load fails here
    public = {
        attr
        for attr in dir(module)
        if not attr.startswith("_")
        and not inspect.ismodule(getattr(module, attr))
        and attr not in {"annotations"}
    }
    assert public == set(exported), f"{name}: public names not in __all__: {public - set(exported)}"


@pytest.mark.parametrize(("name", "names"), SPEC_NAMES.items())
def test_spec_names_import(name: str, names: list[str]) -> None:
    module = importlib.import_module(name)
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing
