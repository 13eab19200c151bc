"""Paths, URLs and recipients a model supplies go through the workspace policy, on
every channel kind, against real local peers (aiosmtpd, a loopback Apprise ``json://`` receiver, a
fake OneBot server). A refusal fails that item only, with a sentence the model can act on, and
nothing refused is read, uploaded, fetched or sent."""

# ruff: noqa: E501  (receipts read best one message per line)

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kernos.boundary import ToolContext, call_tool
from kernos.output import Channel, InboundMessage, OutputKernel, build_channel, output_tools
from kernos.runtime import ConfigError, WorkspacePolicy, load_config
from tests.output.conftest import Inbox, Receiver, Recorder


def mail_config(root: Path, port: int, extra: str = "") -> None:
    (root / "kernos.toml").write_text(
        textwrap.dedent(f"""
        [channels.mail]
        kind = "email"
        host = "127.0.0.1"
        port = {port}
        username = "bot"
        password = "mail-pass-123"
        from = "bot@example.org"
        to = ["ops@example.org"]
        """)
        + extra
    )


async def send_mail(root: Path, arguments: dict[str, Any]) -> str:
    """One ``output_send__mail`` call, the way a model makes it."""
    kernel = OutputKernel.from_config(load_config(cwd=root), hooks=())
    (send,) = [t for t in output_tools(kernel) if t.name == "output_send__mail"]
    result = await call_tool(send, arguments, ToolContext())
    return result.text


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project: ``kernos.toml`` and ``.kernos/`` (the state) in it, HOME inside it too, so the
    hidden and state rules are what refuse, not the root."""
    monkeypatch.delenv("KERNOS_HOME")
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / ".kernos").mkdir()
    (tmp_path / ".kernos" / "kernos.db").write_bytes(b"SQLite format 3\x00")
    (tmp_path / "report.pdf").write_bytes(b"%PDF-1.7 report")
    (tmp_path / "outside.txt").write_text("not in the project")
    return tmp_path


# -- email: the files the issue delivered are refused -------------------------------------------


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ("/etc/passwd", "is outside the workspace (roots: {root}); send a file inside it"),
        (
            "~/.ssh/id_ed25519",
            "is a hidden path (a name starting with '.'), which is never sent; send another file",
        ),
        (
            "kernos.toml",
            "is kernos's own state or configuration, which is never sent; send another file",
        ),
        (
            ".kernos/kernos.db",
            "is kernos's own state or configuration, which is never sent; send another file",
        ),
        ("/proc/self/environ", "is outside the workspace (roots: {root}); send a file inside it"),
        ("file:///etc/passwd", "is outside the workspace (roots: {root}); send a file inside it"),
        ("../outside.txt", "is outside the workspace (roots: {root}); send a file inside it"),
        (
            "http://127.0.0.1:9/x.pdf",
            "is a URL, not a path; send the path of a file in the workspace",
        ),
    ],
)
async def test_email_refuses_what_the_issue_leaked(
    project: Path, smtp: tuple[Inbox, int], payload: str, why: str
) -> None:
    inbox, port = smtp
    mail_config(project, port, '[workspace]\nroots = ["."]\n')
    text = await send_mail(
        project, {"payload": payload, "type": "file", "meta": {"to": "ops@example.org"}}
    )
    assert text == f"sending via [mail] failed: attachment refused: {payload} " + why.format(
        root=project.resolve()
    )
    assert inbox.envelopes == []


async def test_a_file_inside_the_root_is_delivered(project: Path, smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    mail_config(project, port)
    (project / "docs").mkdir()
    (project / "docs" / "notes.txt").write_text("notes")
    text = await send_mail(
        project,
        {"payload": ["report.pdf", (project / "docs/notes.txt").as_uri()], "type": "file"},
    )
    assert text == "sent 2 messages via [mail]"
    attached = [
        (part.get_filename(), part.get_payload(decode=True))
        for message in inbox.messages()
        for part in message.walk()
        if part.get_filename()
    ]
    assert attached == [("report.pdf", b"%PDF-1.7 report"), ("notes.txt", b"notes")]


async def test_a_symlink_from_inside_to_outside_is_refused(
    project: Path, smtp: tuple[Inbox, int]
) -> None:
    inbox, port = smtp
    (project / "app").mkdir()
    (project / "app" / "innocent.pdf").symlink_to(project / "outside.txt")
    (project / "app" / "etc").symlink_to("/etc")
    mail_config(project / "app", port)
    text = await send_mail(
        project / "app",
        {"payload": ["innocent.pdf", "etc/passwd", "etc/../../outside.txt"], "type": "file"},
    )
    assert text.splitlines()[1:4] == [
        f"[1] file failed: attachment refused: innocent.pdf is outside the workspace (roots: {(project / 'app').resolve()}); send a file inside it",
        f"[2] file failed: attachment refused: etc/passwd is outside the workspace (roots: {(project / 'app').resolve()}); send a file inside it",
        f"[3] file failed: attachment refused: etc/../../outside.txt is outside the workspace (roots: {(project / 'app').resolve()}); send a file inside it",
    ]
    assert inbox.envelopes == []


async def test_an_over_cap_file_is_refused_and_the_rest_of_the_batch_goes(
    project: Path, smtp: tuple[Inbox, int]
) -> None:
    inbox, port = smtp
    mail_config(project, port)
    with (project / "big.iso").open("wb") as handle:
        handle.truncate(300 * 1024 * 1024)  # sparse: 300 MB that costs nothing unless read
    text = await send_mail(project, {"payload": ["big.iso", "report.pdf"], "type": "file"})
    assert text.splitlines() == [
        "sent 1/2 messages via [mail]:",
        "[1] file failed: attachment refused: big.iso is 300.0 MB, over the 25.0 MB limit for attachments; send a smaller file",
        "[2] file ok",
        "Resend only the failed items.",
    ]
    assert len(inbox.envelopes) == 1


SEND_BIG = textwrap.dedent(
    """
    import asyncio, json, re, sys

    def peak_kb():  # VmHWM: this process's own peak (ru_maxrss keeps the parent's across exec)
        with open("/proc/self/status") as status:
            return int(re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1))

    from kernos.boundary import ToolContext, call_tool
    from kernos.output import OutputKernel, output_tools
    from kernos.runtime import load_config

    async def main():
        kernel = OutputKernel.from_config(load_config(), hooks=())
        (send,) = [t for t in output_tools(kernel) if t.name == "output_send__mail"]
        before = peak_kb()
        result = await call_tool(send, {"payload": sys.argv[1], "type": "file"}, ToolContext())
        after = peak_kb()
        print(json.dumps({"grew_kb": after - before, "text": result.text}))

    asyncio.run(main())
    """
)


def test_the_over_cap_file_is_never_read_peak_rss_stays_flat(
    project: Path, smtp: tuple[Inbox, int]
) -> None:
    """A fresh process sends it through ``output_send__mail``, so the peak is its own."""
    inbox, port = smtp
    mail_config(project, port)
    with (project / "big.iso").open("wb") as handle:
        handle.truncate(300 * 1024 * 1024)
    done = subprocess.run(
        [sys.executable, "-c", SEND_BIG, "big.iso"],
        capture_output=True,
        text=True,
        check=True,
        cwd=project,
        env={**os.environ, "KERNOS_HOME": str(project / ".kernos")},
    )
    outcome = json.loads(done.stdout)
    assert outcome["text"].startswith(
        "sending via [mail] failed: attachment refused: big.iso is 300.0 MB"
    )
    assert outcome["grew_kb"] < 8 * 1024
    assert inbox.envelopes == []


# -- recipients -----------------------------------------------------------------------------------


async def test_a_recipient_outside_the_allow_list_fails_only_that_item(
    project: Path, smtp: tuple[Inbox, int]
) -> None:
    inbox, port = smtp
    mail_config(project, port)
    text = await send_mail(
        project,
        {
            "payload": ["one", "two", "three", "four"],
            "meta": [
                {"to": "ops@example.org"},
                {"to": ["ops@example.org", "attacker@evil.example"]},
                "",
                {"to": "ops@example.org, attacker@evil.example"},
            ],
        },
    )
    assert text.splitlines() == [
        "sent 2/4 messages via [mail]:",
        "[1] text ok",
        "[2] text failed: recipient refused: to attacker@evil.example is not an allowed recipient of [mail]; send to one of: ops@example.org",
        "[3] text ok",
        "[4] text failed: recipient refused: to ops@example.org, attacker@evil.example is not an allowed recipient of [mail]; send to one of: ops@example.org",
        "Resend only the failed items.",
    ]
    assert [e.rcpt_tos for e in inbox.envelopes] == [["ops@example.org"], ["ops@example.org"]]


async def test_configured_recipients_widen_the_list_and_star_opts_out(
    project: Path, smtp: tuple[Inbox, int]
) -> None:
    inbox, port = smtp
    mail_config(project, port, "")
    toml = (project / "kernos.toml").read_text()
    (project / "kernos.toml").write_text(toml + 'recipients = ["Ana@Example.org"]\n')
    meta = [{"to": "ana@example.org"}, {"to": "bo@example.org"}, {"to": "OPS@example.org"}]
    text = await send_mail(project, {"payload": ["a", "b", "c"], "meta": meta})
    assert text.splitlines()[1:4] == [
        "[1] text ok",
        "[2] text failed: recipient refused: to bo@example.org is not an allowed recipient of [mail]; send to one of: Ana@Example.org, ops@example.org",
        "[3] text ok",
    ]
    (project / "kernos.toml").write_text(toml + 'recipients = ["*"]\n')
    assert await send_mail(project, {"payload": "b", "meta": {"to": "bo@example.org"}}) == "ok"
    assert inbox.envelopes[-1].rcpt_tos == ["bo@example.org"]


def mail_channel(port: int, **extra: Any) -> Channel:
    table = {
        "kind": "email",
        "host": "127.0.0.1",
        "port": port,
        "from": "bot@example.org",
        **extra,
    }
    return build_channel("mail", table)


async def test_the_backfilled_sender_is_admitted_and_only_for_its_private_chat(
    smtp: tuple[Inbox, int],
) -> None:
    inbox, port = smtp
    kernel = OutputKernel([mail_channel(port)])
    private = InboundMessage("mail", "ana@example.org", "private")
    receipt = await kernel.send(
        "mail",
        ["hi", "hi", "hi"],
        meta=["", {"to": "ana@example.org"}, {"to": "x@example.org"}],
        inbound=private,
    )
    assert receipt.text.splitlines()[1:4] == [
        "[1] text ok",
        "[2] text ok",
        "[3] text failed: recipient refused: to x@example.org is not an allowed recipient of [mail]; send to one of: ana@example.org",
    ]
    group = InboundMessage("mail", "ana@example.org", "group", "team")
    refused = await kernel.send("mail", "hi", meta={"to": "ana@example.org"}, inbound=group)
    assert refused.text == (
        "sending via [mail] failed: recipient refused: to ana@example.org is not an allowed "
        "recipient of [mail], which may only answer the private chat a message came from and has "
        "none here; do not retry"
    )
    assert [e.rcpt_tos for e in inbox.envelopes] == [["ana@example.org"]] * 2


async def test_onebot_without_recipients_answers_only_the_chat_it_came_from(
    receiver: Receiver,
) -> None:
    channel = build_channel("qq", {"kind": "onebot", "base_url": receiver.url})
    kernel = OutputKernel([channel])
    inbound = InboundMessage("qq", "10001", "private")
    receipt = await kernel.send(
        "qq",
        ["hi", "hi", "hi", "hi"],
        meta=["", '{"user_id": 10001}', '{"group_id": 555}', '{"user_id": 20002}'],
        inbound=inbound,
    )
    assert receipt.text.splitlines()[1:5] == [
        "[1] text ok",
        "[2] text ok",
        "[3] text failed: recipient refused: group_id 555 is not an allowed recipient of [qq]; send to one of: 10001",
        "[4] text failed: recipient refused: user_id 20002 is not an allowed recipient of [qq]; send to one of: 10001",
    ]
    assert [r.body["user_id"] for r in receiver.received] == [10001, 10001]


async def test_a_key_qualified_recipient_matches_that_key_only(receiver: Receiver) -> None:
    table = {"kind": "onebot", "base_url": receiver.url, "recipients": ["group_id=555", 777]}
    kernel = OutputKernel([build_channel("qq", table)])
    receipt = await kernel.send(
        "qq",
        ["a", "b", "c", "d"],
        meta=['{"group_id": 555}', '{"user_id": 555}', '{"user_id": 777}', '{"group_id": "777"}'],
    )
    assert [line.split(":")[0] for line in receipt.text.splitlines()[1:5]] == [
        "[1] text ok",
        "[2] text failed",
        "[3] text ok",
        "[4] text ok",
    ]
    assert len(receiver.received) == 3


async def test_any_plugin_declaring_recipient_keys_gets_the_same_check(recorder: Recorder) -> None:
    pager = Channel("pager", recorder, recipient_keys=("number",), default_recipients=("555",))
    receipt = await OutputKernel([pager]).send(
        "pager", ["a", "b", "c"], meta=["", '{"number": "555"}', '{"number": "666"}']
    )
    assert receipt.text.splitlines()[3] == (
        "[3] text failed: recipient refused: number 666 is not an allowed recipient of [pager]; "
        "send to one of: 555"
    )
    assert [i.payload for i in recorder.items] == ["a", "b"]


async def test_a_huge_recipient_is_shown_shortened(recorder: Recorder) -> None:
    pager = Channel("pager", recorder, recipient_keys=("number",))
    receipt = await OutputKernel([pager]).send("pager", "a", meta={"number": "9" * 5000})
    assert len(receipt.text) < 400 and "9…" in receipt.text
    assert recorder.calls == []


def test_recipients_belong_to_kinds_that_name_recipients() -> None:
    with pytest.raises(ConfigError, match="does not let the model choose a recipient"):
        build_channel("hook", {"kind": "webhook", "url": "http://127.0.0.1/", "recipients": ["x"]})
    with pytest.raises(ConfigError, match="must be a list of addresses or ids"):
        build_channel(
            "qq", {"kind": "onebot", "base_url": "http://127.0.0.1/", "recipients": [True]}
        )


# -- Apprise: no path passes through, no URL is fetched ------------------------------------------


@pytest.fixture
def fetched() -> Any:
    """A loopback server a model might name in a URL: it records every request (a fetch)."""
    peer = Receiver(respond=lambda request: (200, "GIF89a")).start()
    try:
        yield peer
    finally:
        peer.stop()


def apprise_kernel(receiver: Receiver, root: Path, **extra: Any) -> OutputKernel:
    host = receiver.url.removeprefix("http://")
    table = {"kind": "apprise", "urls": [f"json://{host}/notify"], **extra}
    return OutputKernel([build_channel("n", table, workspace=WorkspacePolicy((root,)))])


async def test_apprise_refuses_urls_and_fetches_nothing(
    receiver: Receiver, fetched: Receiver, project: Path
) -> None:
    # localhost: the channel's own json:// URL is 127.0.0.1, a piece the receipt redacts
    url = fetched.url.replace("127.0.0.1", "localhost") + "/internal/admin"
    receipt = await apprise_kernel(receiver, project / "home").send(
        "n",
        [url, "file:///etc/passwd", "ftp://files.example/x", str(project / "report.pdf")],
        "image",
    )
    assert receipt.text.splitlines()[1:5] == [
        f"[1] image failed: attachment refused: {url} is a URL and this channel does not take URL attachments (kernos fetches no URL a model names); send the path of a file in the workspace",
        f"[2] image failed: attachment refused: file:///etc/passwd is outside the workspace (roots: {(project / 'home').resolve()}); send a file inside it",
        "[3] image failed: attachment refused: ftp://files.example/x uses the ftp:// scheme, which this channel does not take; send the path of a file in the workspace",
        f"[4] image failed: attachment refused: {project / 'report.pdf'} is outside the workspace (roots: {(project / 'home').resolve()}); send a file inside it",
    ]
    assert fetched.received == []
    assert receiver.received == []


async def test_apprise_fetches_a_url_only_when_the_channel_allows_it(
    receiver: Receiver, fetched: Receiver, project: Path
) -> None:
    """The other half of the proof above: the recording server does see a fetch."""
    out = apprise_kernel(receiver, project, allow_url_attachments=True)
    assert (await out.send("n", fetched.url + "/cat.gif", "image")).all_sent
    assert [(r.method, r.path) for r in fetched.received] == [("GET", "/cat.gif")]
    (sent,) = receiver.received
    assert base64.b64decode(sent.body["attachments"][0]["base64"]) == b"GIF89a"


async def test_apprise_gets_the_bytes_of_a_workspace_file_not_its_path(
    receiver: Receiver, project: Path
) -> None:
    link = project / "docs"
    link.mkdir()
    (link / "r.pdf").symlink_to(project / "report.pdf")  # inside to inside: fine
    receipt = await apprise_kernel(receiver, project).send("n", "docs/r.pdf", "file")
    assert receipt.text == "ok"
    (sent,) = receiver.received
    attachment = sent.body["attachments"][0]
    assert attachment["filename"] == "report.pdf"
    assert base64.b64decode(attachment["base64"]) == b"%PDF-1.7 report"


# -- OneBot: media and uploads ------------------------------------------------------------------


def onebot_kernel(receiver: Receiver, root: Path, **extra: Any) -> OutputKernel:
    table = {"kind": "onebot", "base_url": receiver.url, "recipients": ["*"], **extra}
    return OutputKernel([build_channel("qq", table, workspace=WorkspacePolicy((root,)))])


async def test_onebot_media_goes_through_the_policy(receiver: Receiver, project: Path) -> None:
    (project / "cat.png").write_bytes(b"\x89PNG")
    receipt = await onebot_kernel(receiver, project).send(
        "qq",
        [
            "/etc/passwd",
            "file:///etc/passwd",
            "file://" + str(project / "cat.png"),
            "base64://iVBORw0KGgo=",
            "https://example.org/v.amr",
            "gopher://127.0.0.1/x",
            "/proc/self/environ",
            "~/.ssh/id_ed25519",
            "../outside.txt",
        ],
        ["image", "image", "image", "image", "voice", "sticker", "file", "file", "file"],
        {"group_id": 1},
    )
    root = project.resolve()
    assert receipt.text.splitlines()[1:10] == [
        f"[1] image failed: attachment refused: /etc/passwd is outside the workspace (roots: {root}); send a file inside it",
        f"[2] image failed: attachment refused: file:///etc/passwd is outside the workspace (roots: {root}); send a file inside it",
        "[3] image ok",
        "[4] image ok",
        "[5] voice failed: attachment refused: https://example.org/v.amr is a URL and this channel does not take URL attachments (kernos fetches no URL a model names); send the path of a file in the workspace",
        "[6] sticker failed: attachment refused: gopher://127.0.0.1/x uses the gopher:// scheme, which this channel does not take; send the path of a file in the workspace",
        f"[7] file failed: attachment refused: /proc/self/environ is outside the workspace (roots: {root}); send a file inside it",
        "[8] file failed: attachment refused: ~/.ssh/id_ed25519 is a hidden path (a name starting with '.'), which is never sent; send another file",
        f"[9] file failed: attachment refused: ../outside.txt is outside the workspace (roots: {root}); send a file inside it",
    ]
    assert [r.body["message"][0]["data"]["file"] for r in receiver.received] == [
        (project / "cat.png").resolve().as_uri(),
        "base64://iVBORw0KGgo=",
    ]


async def test_onebot_uploads_only_workspace_files_under_the_cap(
    receiver: Receiver, project: Path
) -> None:
    with (project / "big.iso").open("wb") as handle:
        handle.truncate(30 * 1024 * 1024)
    table = {"kind": "onebot", "base_url": receiver.url, "recipients": ["*"]}
    policy = WorkspacePolicy((project,), max_attachment_bytes=1024)
    kernel = OutputKernel([build_channel("qq", table, workspace=policy)])
    receipt = await kernel.send("qq", ["big.iso", "report.pdf", "home"], "file", {"user_id": 5})
    assert receipt.text.splitlines()[1:4] == [
        "[1] file failed: attachment refused: big.iso is 30.0 MB, over the 0.0 MB limit for attachments; send a smaller file",
        "[2] file ok",
        "[3] file failed: attachment refused: home is not a regular file (a directory, device or pipe); send a file",
    ]
    assert [(r.path, r.body["file"]) for r in receiver.received] == [
        ("/upload_private_file", str((project / "report.pdf").resolve()))
    ]


async def test_a_onebot_url_passes_when_the_channel_allows_it(
    receiver: Receiver, project: Path
) -> None:
    out = onebot_kernel(receiver, project, allow_url_attachments=True)
    assert (await out.send("qq", "https://example.org/v.amr", "voice", {"group_id": 1})).all_sent
    assert receiver.received[0].body["message"][0]["data"]["file"] == "https://example.org/v.amr"
