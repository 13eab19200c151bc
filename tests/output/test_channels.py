"""The built-in kinds, each against a real local peer: a file, stdout, a
loopback HTTP server (webhook, OneBot, Apprise json://) and aiosmtpd on loopback (email)."""

# ruff: noqa: E501  (protocol-shaped expectations read best one message per line)

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from kernos.output import Channel, InboundMessage, OutputKernel, build_channel
from kernos.runtime import WorkspacePolicy
from tests.output.conftest import Inbox, Received, Receiver


def kernel(
    name: str,
    table: dict[str, Any],
    base_dir: Path | None = None,
    workspace: WorkspacePolicy | None = None,
) -> OutputKernel:
    return OutputKernel([build_channel(name, table, base_dir=base_dir, workspace=workspace)])


def workspace(root: Path) -> WorkspacePolicy:
    """The files a test sends live in ``root``; its state directory is refused."""
    return WorkspacePolicy((root,), (root / ".kernos",))


# -- file -------------------------------------------------------------------------------------


async def test_file_appends_one_json_line_per_message(tmp_path: Path) -> None:
    out = kernel("log", {"kind": "file", "path": "out/log.jsonl"}, base_dir=tmp_path)
    receipt = await out.send("log", ["a", '{"n": 1}'], ["text", "json"], {"run": 7})
    assert receipt.text == "sent 2 messages via [log]"
    lines = [json.loads(x) for x in (tmp_path / "out/log.jsonl").read_text().splitlines()]
    assert [sorted(line) for line in lines] == [["channel", "meta", "payload", "time", "type"]] * 2
    assert [(x["channel"], x["type"], x["payload"], x["meta"]) for x in lines] == [
        ("log", "text", "a", '{"run":7}'),
        ("log", "json", '{"n": 1}', '{"run":7}'),
    ]


async def test_file_refuses_what_it_cannot_keep(tmp_path: Path) -> None:
    out = kernel("log", {"kind": "file", "path": str(tmp_path / "log.jsonl")})
    receipt = await out.send(
        "log", ["a", "{broken", "cat.png", "b"], ["text", "json", "image", "text"]
    )
    assert receipt.text.splitlines() == [
        "sent 2/4 messages via [log]:",
        "[1] text ok",
        "[2] json failed: payload is not valid JSON (Expecting property name enclosed in double"
        " quotes at character 1); fix it or send it as type text",
        "[3] image failed: unsupported type 'image'; this channel sends: text, markdown, json",
        "[4] text ok",
        "Resend only the failed items.",
    ]
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 2


# -- console ----------------------------------------------------------------------------------


async def test_console_prints_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    out = kernel("term", {"kind": "console"})
    assert (await out.send("term", ["one", "two"])).all_sent
    assert capsys.readouterr().out == "[term] one\n[term] two\n"
    failed = await out.send("term", "x.png", "image")
    assert failed.text == (
        "sending via [term] failed: unsupported type 'image'; this channel sends: text, markdown"
    )


# -- webhook ----------------------------------------------------------------------------------


async def test_webhook_posts_json_and_reports_the_receivers_error(receiver: Receiver) -> None:
    def respond(request: Received) -> tuple[int, Any]:
        if request.body["payload"] == "b":
            return 500, "x" * 300
        return 200, {}

    receiver.respond = respond
    out = kernel(
        "hook",
        {"kind": "webhook", "url": receiver.url + "/hook", "headers": {"X-Team": "ops"}},
    )
    receipt = await out.send("hook", ["a", "b", "c"], ["text", "card", "text"], '{"to":"ops"}')
    assert [r.body for r in receiver.received] == [
        {"channel": "hook", "type": "text", "payload": "a", "meta": '{"to":"ops"}'},
        {"channel": "hook", "type": "card", "payload": "b", "meta": '{"to":"ops"}'},
        {"channel": "hook", "type": "text", "payload": "c", "meta": '{"to":"ops"}'},
    ]
    assert receiver.received[0].path == "/hook"
    assert receiver.received[0].headers["x-team"] == "ops"
    assert receipt.text.splitlines()[2] == "[2] card failed: HTTP 500: " + "x" * 200


async def test_webhook_202_is_not_a_confirmed_delivery(receiver: Receiver) -> None:
    receiver.respond = lambda request: (202, {})
    out = kernel("hook", {"kind": "webhook", "url": receiver.url})
    receipt = await out.send("hook", "a")
    assert receipt.text == (
        "sending via [hook] unconfirmed: accepted by the receiver (HTTP 202), delivery not confirmed"
    )


async def test_webhook_credentials_never_reach_the_model(receiver: Receiver) -> None:
    receiver.respond = lambda request: (401, f"bad token {request.headers['authorization']}")
    out = kernel(
        "hook",
        {
            "kind": "webhook",
            "url": receiver.url,
            "headers": {"Authorization": "Bearer hook-token-123456"},
        },
    )
    receipt = await out.send("hook", "a")
    assert receiver.received[0].headers["authorization"] == "Bearer hook-token-123456"
    assert "hook-token-123456" not in receipt.text
    assert receipt.text == "sending via [hook] failed: HTTP 401: bad token [redacted]"


async def test_webhook_down_is_a_clear_failure(unused_port: int) -> None:
    out = kernel(
        "hook", {"kind": "webhook", "url": f"http://127.0.0.1:{unused_port}/", "timeout": 2}
    )
    receipt = await out.send("hook", "a")
    assert receipt.text == (
        "sending via [hook] failed: could not reach the receiver (ConnectError); check that it is "
        "running"
    )


# -- onebot -----------------------------------------------------------------------------------


def onebot(receiver: Receiver, root: Path | None = None, **extra: Any) -> OutputKernel:
    table = {"kind": "onebot", "base_url": receiver.url, "access_token": "qq-token-abcdef", **extra}
    policy = workspace(root) if root is not None else None
    return OutputKernel([build_channel("qq", table, workspace=policy)])


async def test_onebot_sends_every_type_through_the_right_action(
    receiver: Receiver, tmp_path: Path
) -> None:
    picture = tmp_path / "cat.png"
    picture.write_bytes(b"\x89PNG")
    report = tmp_path / "report.pdf"
    report.write_bytes(b"%PDF")
    receipt = await onebot(
        receiver, tmp_path, recipients=["group_id=123"], allow_url_attachments=True
    ).send(
        "qq",
        ["hello", str(picture), "https://example.org/v.amr", "178", str(picture), str(report)],
        ["text", "image", "voice", "sticker", "sticker", "file"],
        {"group_id": 123, "reply_to": 9},
    )
    assert receipt.text == "sent 6 messages via [qq]"
    sent = [(r.path, r.body) for r in receiver.received]
    reply = {"type": "reply", "data": {"id": "9"}}
    uri = picture.resolve().as_uri()
    assert sent == [
        ("/send_group_msg", {"group_id": 123, "message": [reply, {"type": "text", "data": {"text": "hello"}}]}),
        ("/send_group_msg", {"group_id": 123, "message": [reply, {"type": "image", "data": {"file": uri}}]}),
        ("/send_group_msg", {"group_id": 123, "message": [reply, {"type": "record", "data": {"file": "https://example.org/v.amr"}}]}),
        ("/send_group_msg", {"group_id": 123, "message": [reply, {"type": "face", "data": {"id": "178"}}]}),
        ("/send_group_msg", {"group_id": 123, "message": [reply, {"type": "image", "data": {"file": uri, "sub_type": 1}}]}),
        ("/upload_group_file", {"group_id": 123, "file": str(report.resolve()), "name": "report.pdf"}),
    ]  # fmt: skip
    assert {r.headers["authorization"] for r in receiver.received} == {"Bearer qq-token-abcdef"}


async def test_onebot_private_chat_and_backfill(receiver: Receiver) -> None:
    inbound = InboundMessage("qq", "10001", "private")
    receipt = await onebot(receiver, recipients=[5]).send(
        "qq", ["hi", "again"], meta=[None, '{"user_id": 5}'], inbound=inbound
    )
    assert receipt.all_sent
    assert [(r.path, r.body["user_id"]) for r in receiver.received] == [
        ("/send_private_msg", 10001),
        ("/send_private_msg", 5),
    ]


async def test_onebot_failures_name_the_reason_and_hide_the_token(receiver: Receiver) -> None:
    def respond(request: Received) -> tuple[int, Any]:
        if request.body.get("group_id") == 2:
            return 200, {"status": "failed", "retcode": 1200, "wording": "not in group"}
        if request.body.get("group_id") == 3:
            return 401, "token qq-token-abcdef rejected"
        return 200, {"status": "async", "retcode": 1}

    receiver.respond = respond
    receipt = await onebot(receiver, recipients=["*"]).send(
        "qq",
        ["a", "b", "c", "d", "e"],
        ["text", "text", "text", "gif", "text"],
        ['{"group_id": 1}', '{"group_id": 2}', '{"group_id": 3}', '{"group_id": 4}', "{oops"],
    )
    assert "qq-token" not in receipt.text
    assert receipt.text.splitlines() == [
        "sent 0/5 messages via [qq]:",
        "[1] text unconfirmed: OneBot send_group_msg accepted it asynchronously",
        "[2] text failed: OneBot send_group_msg failed (retcode 1200): not in group",
        "[3] text failed: the OneBot server refused the request (HTTP 401); check access_token",
        "[4] gif failed: unsupported type 'gif'; this channel sends: text, image, voice, file, sticker",
        "[5] text failed: meta is not valid JSON (Expecting property name enclosed in double quotes"
        ' at character 1); send an object like {"group_id": 123456} or {"user_id": 654321, '
        '"reply_to": 42}',
        "Resend only the failed items.",
    ]


async def test_onebot_needs_a_chat_in_meta(receiver: Receiver) -> None:
    receipt = await onebot(receiver).send("qq", "hi")
    assert receipt.text.startswith("sending via [qq] failed: meta must name group_id or user_id")
    assert receiver.received == []


# -- apprise ----------------------------------------------------------------------------------


async def test_apprise_posts_through_a_json_url(receiver: Receiver, tmp_path: Path) -> None:
    picture = tmp_path / "cat.png"
    picture.write_bytes(b"\x89PNG-bytes")
    host = receiver.url.removeprefix("http://")
    out = kernel(
        "notify",
        {"kind": "apprise", "urls": [f"json://{host}/notify"]},
        workspace=workspace(tmp_path),
    )
    receipt = await out.send(
        "notify", ["**build** done", str(picture)], ["markdown", "image"], {"title": "CI"}
    )
    assert receipt.text == "sent 2 messages via [notify]"
    first, second = (r.body for r in receiver.received)
    assert (first["title"], first["message"]) == ("CI", "**build** done")
    assert second["attachments"][0]["filename"] == "cat.png"
    assert base64.b64decode(second["attachments"][0]["base64"]) == b"\x89PNG-bytes"


async def test_apprise_failure_names_no_url_secret(receiver: Receiver) -> None:
    receiver.respond = lambda request: (500, "boom")
    host = receiver.url.removeprefix("http://")
    url = f"json://apprise-user:very-secret-pass@{host}/notify"
    out = kernel("notify", {"kind": "apprise", "urls": [url]})
    receipt = await out.send("notify", "hello")
    assert receipt.text.startswith("sending via [notify] failed: Apprise could not deliver")
    assert "very-secret-pass" not in receipt.text
    assert len(receiver.received) == 1


# -- email ------------------------------------------------------------------------------------


def mail_table(port: int, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "email",
        "host": "127.0.0.1",
        "port": port,
        "username": "bot",
        "password": "mail-pass-123",
        "from": "bot@example.org",
        "to": ["ops@example.org"],
        **extra,
    }


async def test_email_sends_text_and_attachments(smtp: tuple[Inbox, int], tmp_path: Path) -> None:
    inbox, port = smtp
    report = tmp_path / "report.pdf"
    report.write_bytes(b"%PDF-1.7 bytes")
    table = mail_table(port, recipients=["ana@example.org", "bo@example.org"])
    out = kernel("mail", table, workspace=workspace(tmp_path))
    receipt = await out.send(
        "mail",
        ["The build passed.", str(report)],
        ["text", "file"],
        ['{"subject": "Build"}', {"to": ["ana@example.org", "bo@example.org"]}],
    )
    assert receipt.text == "sent 2 messages via [mail]"
    first, second = inbox.messages()
    assert inbox.envelopes[0].rcpt_tos == ["ops@example.org"]
    assert (first["Subject"], first.get_payload().strip()) == ("Build", "The build passed.")
    assert inbox.envelopes[1].rcpt_tos == ["ana@example.org", "bo@example.org"]
    attachments = [p for p in second.walk() if p.get_filename()]
    assert [(p.get_filename(), p.get_content_type()) for p in attachments] == [
        ("report.pdf", "application/pdf")
    ]
    assert attachments[0].get_payload(decode=True) == b"%PDF-1.7 bytes"


async def test_email_failures_are_clear_and_keep_the_password_out(
    smtp: tuple[Inbox, int], tmp_path: Path
) -> None:
    inbox, port = smtp
    table = mail_table(port, password="wrong-pass-999", to=[], recipients=["a@example.org"])
    wrong = kernel("mail", table, workspace=workspace(tmp_path))
    receipt = await wrong.send(
        "mail",
        ["hi", "hi", "missing.png"],
        ["text", "text", "image"],
        [{"to": "a@example.org"}, "", {"to": "a@example.org"}],
    )
    assert "wrong-pass-999" not in receipt.text
    assert receipt.text.splitlines()[1:4] == [
        "[1] text failed: the SMTP server refused the login (535); check username and password",
        '[2] text failed: no recipient: name `to` in meta, e.g. {"to": "ana@example.org", "subject": "Build done"}',
        "[3] image failed: attachment refused: missing.png does not exist; send the path of an existing file in the workspace",
    ]
    assert inbox.envelopes == []


async def test_email_backfills_the_private_sender(smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    out = kernel("mail", mail_table(port, to=[]))
    inbound = InboundMessage("mail", "ana@example.org", "private")
    assert (await out.send("mail", "hello", inbound=inbound)).all_sent
    assert inbox.envelopes[0].rcpt_tos == ["ana@example.org"]


def test_every_built_in_is_a_channel_kind() -> None:
    from kernos.output import channel_kinds

    assert {"console", "file", "webhook", "email", "apprise", "onebot"} <= set(channel_kinds())
    assert isinstance(build_channel("t", {"kind": "console"}), Channel)
