"""typer's help renderer without the rich pieces kernos never shows.

``typer.rich_utils`` (imported by typer the first time it prints help or an error panel) imports
``rich.markdown`` (markdown-it-py, pygments) and ``rich.traceback`` (attrs, ``rich.pretty``) at
module level. kernos's help is rich markup, not markdown, and its exceptions are not prettified
(``pretty_exceptions_enable=False``), so neither is used, yet they were ~40% of ``kernos --help``'s
imports. :func:`install` lets ``typer.rich_utils`` import with stand-ins for the two names it takes
from those modules; each stand-in imports the real class on first use, so nothing changes if typer
ever renders markdown or a traceback. The stand-ins are in ``sys.modules`` only while
``typer.rich_utils`` executes: any later ``import rich.markdown`` gets the real module.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

TARGET = "typer.rich_utils"


class Markdown:
    """Stands in for ``rich.markdown.Markdown``: calling it builds the real one."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from rich.markdown import Markdown

        return Markdown(*args, **kwargs)


class Traceback:
    """Stands in for ``rich.traceback.Traceback``: ``from_exception`` is the real one's."""

    @classmethod
    def from_exception(cls, *args: Any, **kwargs: Any) -> Any:
        from rich.traceback import Traceback

        return Traceback.from_exception(*args, **kwargs)


#: module -> the names ``typer.rich_utils`` imports from it, and their stand-ins
STAND_INS: dict[str, dict[str, type]] = {
    "rich.markdown": {"Markdown": Markdown},
    "rich.traceback": {"Traceback": Traceback},
}


class _Loader:
    """The real loader of ``typer.rich_utils``, run with the stand-ins in place."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ...: the real loader's
        return getattr(self.real, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        module: types.ModuleType | None = self.real.create_module(spec)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        placed = []
        for name, names in STAND_INS.items():
            if name not in sys.modules:  # already imported for real: typer takes the real one
                stand_in = types.ModuleType(name, "kernos: a stand-in while typer.rich_utils loads")
                vars(stand_in).update(names)
                sys.modules[name] = stand_in
                placed.append(name)
        try:
            self.real.exec_module(module)
        except ImportError:
            # typer wants a name the stand-ins lack: load it as typer wrote it, the real modules
            for name in placed:
                del sys.modules[name]
            placed = []
            self.real.exec_module(module)
        finally:
            for name in placed:
                sys.modules.pop(name, None)


class _Finder:
    """Finds ``typer.rich_utils`` as the path finder does, and wraps its loader; once."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != TARGET:
            return None
        uninstall()
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)  # type: ignore[assignment]
        return spec


_FINDER = _Finder()


def install() -> None:
    """Make the next import of ``typer.rich_utils`` use the stand-ins (no-op if it is loaded)."""
    if TARGET not in sys.modules and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def _option_value(self: Any, ctx: Any) -> str | None:
    """What an option takes, as git and uv write it: ``--model MODEL``; a flag takes nothing."""
    if self.is_flag or self.count:
        return None
    name = self.metavar or (self.name or "value").upper()
    return f"{name}..." if self.nargs != 1 or self.multiple else str(name)


def _argument_usage(self: Any) -> str:
    """An argument on the usage line: ``PROMPT``, ``[ID]``, ``PAYLOAD...``."""
    name = str(self.metavar or (self.name or "arg").upper())
    name = name if self.required else f"[{name}]"
    return f"{name}..." if self.nargs != 1 else name


def plain_names() -> None:
    """Help without type tags: typer (0.29) shows one on every parameter (``<bool>``, ``<str>``,
    ``<list[str]>``) and writes a required argument ``{prompt}``; kernos's help reads like git's:
    an option that takes a value names it in capitals, a flag shows nothing, an argument is
    ``PROMPT``. typer builds its parameters from these two classes and has no hook for this."""
    from typer.core import TyperArgument, TyperOption

    TyperOption.display_type_rich = _option_value  # type: ignore[method-assign]
    TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[method-assign]
    TyperArgument._usage_display_name = _argument_usage  # type: ignore[method-assign]
