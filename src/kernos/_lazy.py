"""Public names of a package imported on first use (PEP 562), so a light command stays light.

A package ``__init__`` maps each public name to the private module that defines it and installs the
module-level ``__getattr__``/``__dir__`` built here; type checkers read the same names from plain
imports under ``typing.TYPE_CHECKING``. ``kernos --help`` or ``kernos tasks list`` then never import
pydantic-ai or the openai SDK, which only the commands that talk to a model need.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def exports(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose ``names`` map a public name to its module.

    A name is imported from ``package.<module>`` on first access and then stored in the package's
    namespace, so later lookups are plain attribute reads and ``vars(package)`` shows it.
    """

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
