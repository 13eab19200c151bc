"""The tools, only for the channels the agent may use, through call_tool."""

# ruff: noqa: E501  (snapshots hold model-facing text verbatim, one line per line)

from __future__ import annotations

from importlib.resources import files

from inline_snapshot import snapshot

from kernos.boundary import ToolContext, call_tool
from kernos.output import Channel, OutputKernel, output_tools, send_schema
from tests.output.conftest import Recorder


def kernel(recorder: Recorder) -> OutputKernel:
    return OutputKernel(
        [
            recorder.channel(
                "qq", description="QQ chats.", types=("text", "sticker"), meta_help="{}"
            ),
            recorder.channel("log", description="Audit log."),
        ],
        allowed_outputs={"bot": ["qq"]},
    )


def test_tools_exist_only_for_allowed_channels(recorder: Recorder) -> None:
    names = [t.name for t in output_tools(kernel(recorder), "bot")]
    assert names == ["output_send__qq", "output_send__qq_help", "output_list_channels"]
    everyone = [t.name for t in output_tools(kernel(recorder), "main")]
    assert "output_send__log" in everyone and "output_send__qq" in everyone


def test_no_channels_no_tools() -> None:
    assert output_tools(OutputKernel(), "main") == []


def test_schema_takes_a_string_or_an_array() -> None:
    schema = send_schema()
    assert schema["required"] == ["payload"]
    for field in ("payload", "type"):
        assert schema["properties"][field]["anyOf"] == [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}},
        ]
    assert {"type": "object"} in schema["properties"]["meta"]["anyOf"]


def test_send_description_is_the_channel_description_plus_one_line(recorder: Recorder) -> None:
    tool = output_tools(kernel(recorder), "bot")[0]
    assert tool.description == snapshot("""\
QQ chats.
Types: text, sticker.
meta: {}
To send several messages in one call, make payload an array (sent in order); give type and meta once for all, or one entry per payload.\
""")


async def test_send_tool_goes_through_the_pipeline(recorder: Recorder) -> None:
    tools = {t.name: t for t in output_tools(kernel(recorder), "bot")}
    ctx = ToolContext(agent="bot")
    single = await call_tool(
        tools["output_send__qq"], '{"payload": "hi", "type": "", "meta": null}', ctx
    )
    assert single.text == "ok" and not single.is_error
    batch = await call_tool(
        tools["output_send__qq"],
        {"payload": ["a", "b"], "type": ["text", "sticker"], "meta": {"group_id": 1}, "extra": ""},
        ctx,
    )
    assert batch.text == "sent 2 messages via [qq]"
    assert [(i.type, i.meta) for i in recorder.items[1:]] == [
        ("text", '{"group_id":1}'),
        ("sticker", '{"group_id":1}'),
    ]
    rejected = await call_tool(tools["output_send__qq"], {"type": "text"}, ctx)
    assert rejected.is_error and rejected.code == "missing_payload"
    assert len(recorder.calls) == 3


async def test_an_inherited_tool_still_meets_the_callers_gate(recorder: Recorder) -> None:
    send_log = {t.name: t for t in output_tools(kernel(recorder), "main")}["output_send__log"]
    result = await call_tool(send_log, {"payload": ["a", "b"]}, ToolContext(agent="bot"))
    assert result.code == "not_authorized"
    assert recorder.calls == []


async def test_help_and_list(recorder: Recorder) -> None:
    tools = {t.name: t for t in output_tools(kernel(recorder), "main")}
    help_text = (await call_tool(tools["output_send__qq_help"], {}, ToolContext())).text
    assert help_text == snapshot("""\
QQ chats.
Types: text, sticker.
meta: {}

Call output_send__qq with payload (required), type and meta.
- One message: payload "text". The answer is ok when it was sent.
- Several: payload ["a", "b"], with type "image" for all or ["text", "image"] one each; the same for meta.
- A failed item does not stop the others; the answer lists each failed item with the reason. Resend only those.\
""")
    listed = await call_tool(tools["output_list_channels"], {}, ToolContext(agent="bot"))
    assert listed.text == "- qq: QQ chats. Types: text, sticker."
    listed_all = await call_tool(tools["output_list_channels"], {}, ToolContext())
    assert listed_all.text.splitlines() == [
        "- qq: QQ chats. Types: text, sticker.",
        "- log: Audit log.",
    ]


def test_model_facing_text_sizes() -> None:
    """Every prompt and description the model reads, with its size, so growth is visible."""
    sizes = {}
    for package in ("kernos.output.texts", "kernos.output.channels"):
        for entry in sorted(files(package).iterdir(), key=lambda e: e.name):
            if entry.name.endswith((".md", ".txt")):
                sizes[f"{package.rsplit('.', 1)[1]}/{entry.name}"] = len(entry.read_text("utf-8"))
    print("\n".join(f"{n}: {s} chars" for n, s in sizes.items()))
    assert sizes == snapshot(
        {
            "texts/help.md": 350,
            "texts/help_tool.md": 77,
            "texts/list_tool.md": 88,
            "texts/send_arrays.md": 136,
            "texts/send_params.txt": 300,
            "channels/apprise.md": 273,
            "channels/console.md": 80,
            "channels/email.md": 251,
            "channels/file.md": 184,
            "channels/onebot.md": 369,
            "channels/webhook.md": 152,
        }
    )
    assert all(size < 400 for size in sizes.values())


def test_a_channel_name_too_long_for_a_tool_is_refused_when_the_channel_is_made(
    recorder: Recorder,
) -> None:
    """``Channel("e" * 47)`` used to be accepted, then ``output_tools`` raised and took every
    output tool down. The longest name makes tools that fit the 64-character limit."""
    import pytest

    with pytest.raises(ValueError, match="1-46 letters"):
        Channel("e" * 47, recorder)
    tools = output_tools(OutputKernel([Channel("e" * 46, recorder)]))
    assert max(len(t.name) for t in tools) == 64


async def test_the_send_tool_backfills_from_the_inbound_message(recorder: Recorder) -> None:
    from kernos.output import InboundMessage

    kernel = OutputKernel([recorder.channel("qq", recipient_keys=("user_id", "group_id"))])
    private = InboundMessage("qq", "10001", "private")
    send = output_tools(kernel, inbound=private)[0]
    await call_tool(send, {"payload": "hi"}, ToolContext())
    group = InboundMessage("qq", "10001", "group", "555")
    await call_tool(send, {"payload": "hi"}, ToolContext(extras={"inbound": group}))
    assert [i.meta for i in recorder.items] == ['{"user_id":"10001"}', None]


async def test_the_gate_and_the_parse_run_in_the_semantic_stage_before_execute(
    recorder: Recorder,
) -> None:
    import dataclasses

    send_log = {t.name: t for t in output_tools(kernel(recorder), "main")}["output_send__log"]
    executed: list[object] = []

    async def spy(params: object, ctx: ToolContext) -> object:
        executed.append(params)
        return await send_log.execute(params, ctx)  # type: ignore[arg-type]

    watched = dataclasses.replace(send_log, execute=spy)
    for args, agent, code in (
        ({"payload": ["a"]}, "bot", "not_authorized"),
        ({"payload": ["a", None]}, "main", "empty_entry"),
    ):
        result = await call_tool(watched, args, ToolContext(agent=agent))
        assert (result.stage, result.code) == ("semantic", code), result
    assert executed == [] and recorder.calls == []
    sent = await call_tool(watched, {"payload": ["a", "b"]}, ToolContext(agent="main"))
    assert sent.text == "sent 2 messages via [log]" and len(executed) == 1
