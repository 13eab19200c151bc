"""Plugins' per-item stage hooks (``kernos.output_hooks``): the data type the registry loads and the
kernel runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kernos.output._channel import OutputContext
from kernos.output._parse import OutputItem
from kernos.output._receipt import ItemOutcome

BeforeOutput = Callable[[OutputItem, OutputContext], Awaitable[OutputItem | None]]
AfterOutput = Callable[[OutputItem, OutputContext, ItemOutcome], Awaitable[None]]


@dataclass(frozen=True)
class OutputHook:
    """A plugin's stage hooks; either may be omitted.

    Args:
        name: shown in logs.
        before_output: ``async (item, ctx) -> OutputItem | None``: ``None`` keeps the item, an item
            replaces it (a blank payload clears it: the item fails ``cleared by plugin``), raising
            :class:`OutputBlocked` vetoes it.
        after_output: ``async (item, ctx, outcome) -> None``: an observer; its errors are logged
            and never change the outcome.
    """

    name: str
    before_output: BeforeOutput | None = None
    after_output: AfterOutput | None = None
