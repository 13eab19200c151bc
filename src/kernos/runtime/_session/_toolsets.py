"""The one ``Toolset`` protocol every source of tools follows, and the helpers that compose them.

A toolset offers a session tools (:meth:`Toolset.tools`), may have background work that can still
send the session messages (:meth:`Toolset.outstanding`, :meth:`Toolset.wait_change`), and owns its
resources for the span of an ``async with``. Tasks, output channels, compression, built-in and
function tools and MCP servers all follow it; ``kernos._app`` composes them with an
:class:`contextlib.AsyncExitStack`. A toolset whose unfinished work can be stopped early also has
``async cancel(reason)`` (see :func:`cancel_toolsets`).

This module imports nothing heavy: config, the store and ``kernos tasks`` stay light.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kernos.boundary import ToolSpec

if TYPE_CHECKING:
    from typing import Self


@runtime_checkable
class Toolset(Protocol):
    """A source of tools for a session, with an async lifecycle (``async with``)."""

    @property
    def name(self) -> str:
        """A short name for logs and errors (``tasks``, ``output``, ``mcp``…)."""
        ...

    async def tools(self, session: Any) -> Sequence[ToolSpec[Any]]:
        """The tools this toolset offers ``session`` (a :class:`kernos.runtime.Session`)."""
        ...

    def outstanding(self) -> bool:
        """True while background work may still send the session a message."""
        ...

    async def wait_change(self) -> None:
        """Return when the background work changed state."""
        ...

    async def __aenter__(self) -> Any:
        """Open the toolset's resources (a server may also start on first :meth:`tools`)."""
        ...

    async def __aexit__(self, *exc_info: Any) -> Any:
        """Release every resource; must not raise for an exception the body raised."""
        ...


@runtime_checkable
class Cancellable(Protocol):
    """A toolset whose unfinished work can be stopped and recorded as cancelled."""

    async def cancel(self, reason: str) -> None:
        """Stop unfinished work now; what was stopped is recorded ``cancelled`` with ``reason``."""
        ...


class Watcher(Protocol):
    """Deprecated: background work that may still send a session messages; use :class:`Toolset`
    (whose ``outstanding``/``wait_change`` are this protocol)."""

    def outstanding(self) -> bool: ...

    async def wait_change(self) -> None: ...


class BaseToolset:
    """A toolset with no background work and nothing to release; subclasses override what they
    need (``tools`` at least)."""

    name = "toolset"

    async def tools(self, session: Any) -> Sequence[ToolSpec[Any]]:
        return []

    def outstanding(self) -> bool:
        return False

    async def wait_change(self) -> None:
        await asyncio.Event().wait()  # nothing ever changes

    async def aclose(self) -> None:
        """Release resources (called on exit of ``async with``)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class StaticToolset(BaseToolset):
    """A fixed list of tools as a toolset (a library user's own specs, say)."""

    def __init__(self, specs: Iterable[ToolSpec[Any]], *, name: str = "static") -> None:
        self.name = name
        self.specs = list(specs)

    async def tools(self, session: Any) -> Sequence[ToolSpec[Any]]:
        return list(self.specs)


async def cancel_toolsets(toolsets: Iterable[object], reason: str) -> None:
    """Stop the unfinished work of every toolset that can be cancelled."""
    for toolset in toolsets:
        if isinstance(toolset, Cancellable):
            await toolset.cancel(reason)


async def shielded(work: Awaitable[Any]) -> Any:
    """Run cleanup to its end even if the task running it is cancelled again meanwhile."""
    future = asyncio.ensure_future(work)
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.cancelled():
                raise
    return future.result()
