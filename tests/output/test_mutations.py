"""The three mutation checks of the output kernel, run on every test run: each mutant of the
kernel must make its criterion fail, with the failure named here."""

from __future__ import annotations

from typing import Any

import pytest

import kernos.output._kernel as kernel_module
from kernos.output import (
    Channel,
    ItemOutcome,
    OutputContext,
    OutputItem,
    OutputKernel,
    SendStatus,
    parse_output_items,
)
from tests.output import test_kernel as criteria
from tests.output.conftest import Recorder


async def test_stopping_at_the_first_failure_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    async def stop_at_first_failure(
        self: OutputKernel, channel: Channel, items: list[OutputItem], **kw: Any
    ) -> list[ItemOutcome]:
        outcomes = []
        for index, item in enumerate(items, 1):
            outcome = await self.send_one(channel, item, OutputContext(channel.name, index=index))
            outcomes.append(outcome)
            if outcome.status is SendStatus.FAILED:
                break
        return outcomes

    monkeypatch.setattr(OutputKernel, "send_items", stop_at_first_failure)
    with pytest.raises(AssertionError, match="called 2 times"):
        await criteria.test_partial_failure_reports_and_continues(Recorder())


async def test_a_kernel_type_check_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = OutputKernel.send_one

    async def with_capability_switch(
        self: OutputKernel, channel: Channel, item: OutputItem, ctx: OutputContext
    ) -> ItemOutcome:
        if item.type not in ("text", "voice", "image", "file"):  # the switch the seed removed
            return ItemOutcome(ctx.index, item.type, SendStatus.FAILED, "unsupported")
        return await real(self, channel, item, ctx)

    monkeypatch.setattr(OutputKernel, "send_one", with_capability_switch)
    with pytest.raises(AssertionError, match="must not judge a type"):
        await criteria.test_kernel_does_not_interpret_type(Recorder())


async def test_not_broadcasting_meta_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def first_item_only(*args: Any, **kwargs: Any) -> list[OutputItem]:
        items = parse_output_items(*args, **kwargs)
        return [items[0], *(OutputItem(i.payload, i.type, None) for i in items[1:])]

    monkeypatch.setattr(kernel_module, "parse_output_items", first_item_only)
    with pytest.raises(AssertionError, match="meta was not broadcast"):
        await criteria.test_meta_broadcast(Recorder())
