"""The gate, send_one's stages for every item, and the receipts."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot

from kernos.output import (
    Channel,
    ChannelError,
    Delivery,
    InboundMessage,
    ItemOutcome,
    OutputBlocked,
    OutputContext,
    OutputHook,
    OutputItem,
    OutputKernel,
    SendStatus,
    backfill_meta,
)
from tests.output.conftest import Recorder


def kernel_for(recorder: Recorder, **kwargs: Any) -> OutputKernel:
    return OutputKernel([recorder.channel("qq"), Channel("log", recorder)], **kwargs)


# -- the eight criteria -----------------------------------------------------------------------


async def test_single_value_unchanged(recorder: Recorder) -> None:
    receipt = await kernel_for(recorder).send("qq", "hello")
    assert receipt.text == "ok"
    assert recorder.items == [OutputItem("hello", "text", None)]


async def test_array_sends_in_order(recorder: Recorder) -> None:
    receipt = await kernel_for(recorder).send("qq", ["a", "b", "c"], ["text", "image", "voice"])
    assert [(i.payload, i.type) for i in recorder.items] == [
        ("a", "text"),
        ("b", "image"),
        ("c", "voice"),
    ]
    assert [ctx.index for _, ctx in recorder.calls] == [1, 2, 3]
    assert receipt.text == "sent 3 messages via [qq]"


async def test_meta_broadcast(recorder: Recorder) -> None:
    await kernel_for(recorder).send("qq", ["a", "b", "c"], "text", '{"group_id":1}')
    metas = [i.meta for i in recorder.items]
    assert metas == ['{"group_id":1}'] * 3, f"meta was not broadcast to every item: {metas}"


async def test_length_mismatch_rejects_whole_call(recorder: Recorder) -> None:
    receipt = await kernel_for(recorder).send("qq", ["a", "b", "c"], ["text", "image"])
    assert receipt.code == "length_mismatch"
    assert recorder.calls == []


async def test_partial_failure_reports_and_continues(recorder: Recorder) -> None:
    recorder.fail[2] = "image too large (5 MB; limit 2 MB)"
    receipt = await kernel_for(recorder).send("qq", ["a", "b.png", "c"], ["text", "image", "text"])
    assert len(recorder.calls) == 3, f"handler called {len(recorder.calls)} times, expected 3"
    assert receipt.text == snapshot("""\
sent 2/3 messages via [qq]:
[1] text ok
[2] image failed: image too large (5 MB; limit 2 MB)
[3] text ok
Resend only the failed items.\
""")


async def test_kernel_does_not_interpret_type(recorder: Recorder) -> None:
    receipt = await kernel_for(recorder).send("qq", ["hi", "🐱"], ["text", "sticker"])
    assert [i.type for i in recorder.items] == ["text", "sticker"], (
        "the kernel must not judge a type against capabilities"
    )
    assert receipt.all_sent


async def test_rejects_empty_entries(recorder: Recorder) -> None:
    receipt = await kernel_for(recorder).send("qq", ["a", "  ", "c"])
    assert receipt.code == "empty_entry"
    assert recorder.calls == []


async def test_unauthorized_still_blocked(recorder: Recorder) -> None:
    kernel = kernel_for(recorder, allowed_outputs={"main": ["log"]})
    receipt = await kernel.send("qq", ["a", "b"], agent="main")
    assert receipt.code == "not_authorized"
    assert receipt.text == (
        "channel [qq] is not authorized for this agent; see output_list_channels"
    )
    assert recorder.calls == []


# -- the gate ---------------------------------------------------------------------------------


async def test_gate_checks_authorization_before_existence(recorder: Recorder) -> None:
    kernel = kernel_for(recorder, allowed_outputs={"bot": ["qq"], "all": []})
    assert (await kernel.send("nope", "x", agent="bot")).code == "not_authorized"
    missing = await kernel.send("nope", "x", agent="all")
    assert missing.code == "unknown_channel"
    assert missing.text == (
        "channel [nope] does not exist or is unavailable; see output_list_channels"
    )
    assert recorder.calls == []


async def test_agents_without_allowed_outputs_may_use_every_channel(recorder: Recorder) -> None:
    kernel = kernel_for(recorder, allowed_outputs={"bot": ["qq"]})
    assert [c.name for c in kernel.channels_for("other")] == ["qq", "log"]
    assert [c.name for c in kernel.channels_for("bot")] == ["qq"]


async def test_rejection_result_carries_the_code(recorder: Recorder) -> None:
    result = (await kernel_for(recorder).send("qq", [])).to_tool_result()
    assert result.is_error and result.code == "missing_payload" and result.stage == "semantic"


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    payload=st.one_of(st.none(), st.text(max_size=3), st.lists(st.text(max_size=3), max_size=4)),
    type_=st.one_of(st.none(), st.text(max_size=3), st.lists(st.text(max_size=3), max_size=4)),
    meta=st.one_of(st.none(), st.text(max_size=3), st.lists(st.text(max_size=3), max_size=4)),
    channel=st.sampled_from(["qq", "log", "nope"]),
)
async def test_a_rejected_call_never_reaches_a_handler(
    payload: Any, type_: Any, meta: Any, channel: str
) -> None:
    recorder = Recorder()
    kernel = kernel_for(recorder, allowed_outputs={"main": ["log", "nope"]})
    receipt = await kernel.send(channel, payload, type_, meta)
    if receipt.rejected:
        assert recorder.calls == []
    else:
        assert len(recorder.calls) == receipt.total >= 1


@settings(max_examples=60)
@given(
    n=st.integers(1, 20),
    allowed=st.lists(st.sampled_from(["qq", "log", "mail"]), max_size=3),
    target=st.sampled_from(["qq", "log", "mail", "ghost"]),
)
async def test_an_array_never_reaches_a_channel_a_single_call_could_not(
    n: int, allowed: list[str], target: str
) -> None:
    recorder = Recorder()
    kernel = OutputKernel(
        [Channel(name, recorder) for name in ("qq", "log", "mail")],
        allowed_outputs={"main": allowed},
    )
    single = await kernel.send(target, "x")
    recorder.calls.clear()
    batch = await kernel.send(target, ["x"] * n)
    assert single.code == batch.code
    if single.rejected:
        assert recorder.calls == []
    else:
        assert {ctx.channel for _, ctx in recorder.calls} == {target}


# -- results ----------------------------------------------------------------------------------


async def test_single_path_failure_is_the_handlers_text_verbatim() -> None:
    async def refuse(item: OutputItem, ctx: OutputContext) -> None:
        raise ChannelError("unsupported type 'voice'; this channel sends: text, image")

    receipt = await OutputKernel([Channel("qq", refuse)]).send("qq", "hm.ogg", "voice")
    assert receipt.text == (
        "sending via [qq] failed: unsupported type 'voice'; this channel sends: text, image"
    )
    assert not receipt.all_sent


async def test_unconfirmed_items_are_reported_and_not_counted() -> None:
    async def maybe(item: OutputItem, ctx: OutputContext) -> Delivery | SendStatus | None:
        if ctx.index == 1:
            return Delivery.queued("the server queued it")
        if ctx.index == 2:
            return SendStatus.UNCONFIRMED
        return None

    kernel = OutputKernel([Channel("qq", maybe)])
    receipt = await kernel.send("qq", ["a", "b", "c"])
    assert receipt.text == snapshot("""\
sent 1/3 messages via [qq]:
[1] text unconfirmed: the server queued it
[2] text unconfirmed: unconfirmed
[3] text ok\
""")
    assert receipt.sent == 1 and not receipt.all_sent
    single = await kernel.send("qq", "a")
    assert single.text == "sending via [qq] unconfirmed: the server queued it"


async def test_a_plugin_bug_fails_its_item_only() -> None:
    async def buggy(item: OutputItem, ctx: OutputContext) -> None:
        if ctx.index == 1:
            raise KeyError("user_id")

    receipt = await OutputKernel([Channel("qq", buggy)]).send("qq", ["a", "b"])
    assert receipt.text.splitlines()[1:3] == ["[1] text failed: KeyError: 'user_id'", "[2] text ok"]


async def test_receipt_details_list_each_item(recorder: Recorder) -> None:
    recorder.fail[1] = "down"
    result = (await kernel_for(recorder).send("qq", ["a", "b"])).to_tool_result()
    assert result.code == "send_failed"
    assert result.details["items"] == [
        {"index": 1, "type": "text", "status": "failed", "text": "down"},
        {"index": 2, "type": "text", "status": "sent", "text": ""},
    ]


async def test_secrets_never_reach_the_receipt_or_the_log(caplog: pytest.LogCaptureFixture) -> None:
    async def leaky(item: OutputItem, ctx: OutputContext) -> None:
        raise ChannelError("401 for token s3cr3t-T0KEN at https://x/?key=s3cr3t-T0KEN")

    kernel = OutputKernel([Channel("qq", leaky, secrets=("s3cr3t-T0KEN",))])
    with caplog.at_level(logging.DEBUG, logger="kernos.output"):
        receipt = await kernel.send("qq", ["a", "b"])
    assert "s3cr3t" not in receipt.text
    assert "[redacted]" in receipt.text
    assert "s3cr3t" not in caplog.text


# -- stages for every item --------------------------------------------------------------------


async def test_every_stage_runs_for_every_item(recorder: Recorder) -> None:
    seen: list[str] = []

    async def before(item: OutputItem, ctx: OutputContext) -> OutputItem | None:
        seen.append(f"before {ctx.index}")
        return None

    async def after(item: OutputItem, ctx: OutputContext, outcome: ItemOutcome) -> None:
        seen.append(f"after {ctx.index} {outcome.status.value}")

    recorder.fail[2] = "nope"
    kernel = kernel_for(recorder, hooks=[OutputHook("audit", before, after)])
    await kernel.send("qq", ["a", "b", "c"])
    assert seen == [
        "before 1",
        "after 1 sent",
        "before 2",
        "after 2 failed",
        "before 3",
        "after 3 sent",
    ]


async def test_before_output_rewrites_vetoes_and_clears(recorder: Recorder) -> None:
    async def before(item: OutputItem, ctx: OutputContext) -> OutputItem | None:
        if item.payload == "secret":
            raise OutputBlocked("contains a password")
        if item.payload == "drop":
            return OutputItem("", item.type, item.meta)
        return OutputItem(item.payload.upper(), item.type, item.meta)

    kernel = kernel_for(recorder, hooks=[OutputHook("guard", before_output=before)])
    receipt = await kernel.send("qq", ["a", "secret", "drop", "b"])
    assert [i.payload for i in recorder.items] == ["A", "B"]
    assert receipt.text == snapshot("""\
sent 2/4 messages via [qq]:
[1] text ok
[2] text failed: blocked by plugin: contains a password
[3] text failed: cleared by plugin
[4] text ok
Resend only the failed items.\
""")


async def test_after_output_errors_are_logged_and_change_nothing(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(item: OutputItem, ctx: OutputContext, outcome: ItemOutcome) -> None:
        raise RuntimeError("metrics backend down")

    kernel = kernel_for(recorder, hooks=[OutputHook("metrics", after_output=broken)])
    with caplog.at_level(logging.WARNING, logger="kernos.output"):
        receipt = await kernel.send("qq", ["a", "b"])
    assert receipt.text == "sent 2 messages via [qq]"
    assert "metrics backend down" in caplog.text


async def test_a_crashing_before_hook_blocks_its_item(recorder: Recorder) -> None:
    async def crash(item: OutputItem, ctx: OutputContext) -> OutputItem | None:
        raise ValueError("bug")

    kernel = kernel_for(recorder, hooks=[OutputHook("bad", before_output=crash)])
    receipt = await kernel.send("qq", "a")
    assert (
        receipt.text == "sending via [qq] failed: blocked by plugin: hook bad failed (ValueError)"
    )
    assert recorder.calls == []


# -- safe backfill ----------------------------------------------------------------------------

PRIVATE = InboundMessage("qq", "10001", "private")
ONEBOT_KEYS = Channel("qq", Recorder(), recipient_keys=("user_id", "group_id"))


@pytest.mark.parametrize(
    ("meta", "inbound", "expected"),
    [
        (None, PRIVATE, '{"user_id":"10001"}'),
        ('{"reply_to":5}', PRIVATE, '{"reply_to":5,"user_id":"10001"}'),
        ('{"user_id":42}', PRIVATE, '{"user_id":42}'),  # never overwrite
        ('{"group_id":7}', PRIVATE, '{"group_id":7}'),  # a recipient is there
        ("{not json", PRIVATE, "{not json"),  # left for the handler to report
        ('["a"]', PRIVATE, '["a"]'),
        (None, InboundMessage("qq", "10001", "group", "555"), None),  # sender is not recipient
        (None, InboundMessage("mail", "10001", "private"), None),  # another channel
        (None, None, None),
    ],
)
def test_backfill_is_conservative(
    meta: str | None, inbound: InboundMessage | None, expected: str | None
) -> None:
    assert backfill_meta(meta, inbound, ONEBOT_KEYS) == expected


def test_backfill_needs_a_channel_that_names_recipients() -> None:
    assert backfill_meta(None, InboundMessage("log", "x"), Channel("log", Recorder())) is None


async def test_backfill_runs_for_every_item_after_before_hooks(recorder: Recorder) -> None:
    async def before(item: OutputItem, ctx: OutputContext) -> OutputItem | None:
        assert item.meta is None or "user_id" not in item.meta  # hooks see the call's own meta
        return None

    kernel = OutputKernel(
        [recorder.channel("qq", recipient_keys=("user_id", "group_id"), recipients=("*",))],
        hooks=[OutputHook("h", before_output=before)],
    )
    await kernel.send("qq", ["a", "b"], None, [None, '{"group_id":9}'], inbound=PRIVATE)
    assert [i.meta for i in recorder.items] == ['{"user_id":"10001"}', '{"group_id":9}']


def test_channel_names_are_validated() -> None:
    for bad in ["", "has space", "a/b", "x" * 47, "x" * 65, "名字"]:
        with pytest.raises(ValueError, match="not valid: use 1-46 letters"):
            Channel(bad, Recorder())
    assert Channel("ok_name-1", Recorder()).name == "ok_name-1"
    assert Channel("x" * 46, Recorder()).name == "x" * 46
