"""`kernos send` and `kernos channels` as a user runs them (real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

from tests import _cli

CONFIG = textwrap.dedent("""
    [agents.bot]
    allowed_outputs = ["term"]

    [channels.log]
    kind = "file"
    description = "Audit log."
    path = "out/log.jsonl"

    [channels.term]
    kind = "console"
""")


def kernos(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KERNOS_HOME": str(cwd / ".kernos")}
    return _cli.kernos(*args, cwd=cwd, env=env, timeout=60)


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_send_single_batch_failure_and_rejection(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    log = tmp_path / "out/log.jsonl"

    single = kernos("send", "log", "hello", cwd=tmp_path)
    assert (single.returncode, single.stdout) == (0, "ok\n")

    partial = kernos(
        "send", "log", "start", "{oops", "done",
        "--type", "text", "--type", "json", "--type", "text", "--meta", '{"run": 1}',
        cwd=tmp_path,
    )  # fmt: skip
    assert partial.returncode == 1
    assert partial.stdout.splitlines()[0] == "sent 2/3 messages via [log]:"
    assert partial.stdout.splitlines()[2].startswith("[2] json failed: payload is not valid JSON")

    rejected = kernos("send", "log", "a", "b", "--type", " ", "--type", "text", cwd=tmp_path)
    assert (rejected.returncode, rejected.stdout) == (2, "")
    assert rejected.stderr.startswith("error: entry 1 of `type` is empty")

    unauthorized = kernos("send", "log", "a", "b", "--agent", "bot", cwd=tmp_path)
    assert (unauthorized.returncode, unauthorized.stdout) == (2, "")
    assert unauthorized.stderr.startswith("error: channel [log] is not authorized for agent bot")
    assert [(x["payload"], x["meta"]) for x in lines(log)] == [
        ("hello", None),
        ("start", '{"run": 1}'),
        ("done", '{"run": 1}'),
    ]


def test_send_to_the_console_and_list_channels(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    sent = kernos("send", "term", "hi", "there", "--agent", "bot", cwd=tmp_path)
    assert (sent.returncode, sent.stdout) == (
        0,
        "[term] hi\n[term] there\nsent 2 messages via [term]\n",
    )
    listed = kernos("channels", cwd=tmp_path)
    assert listed.returncode == 0
    assert listed.stdout.splitlines() == [
        "NAME  KIND     TYPES                 DESCRIPTION",
        "log   file     text, markdown, json  Audit log.",
        "term  console  text, markdown        Prints each message on the terminal of the person "
        "running kernos.",
    ]
    as_json = json.loads(kernos("channels", "--json", cwd=tmp_path).stdout)
    assert as_json["channels"][0] == {
        "name": "log",
        "kind": "file",
        "types": ["text", "markdown", "json"],
        "description": "Audit log.",
    }


def test_send_json_receipts(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    sent = kernos("send", "log", "a", "b", "--json", cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout) == {
        "channel": "log",
        "text": "sent 2 messages via [log]",
        "code": None,
        "error": None,
        "all_sent": True,
        "sent": 2,
        "total": 2,
        "items": [
            {"index": 1, "type": "text", "status": "sent", "text": ""},
            {"index": 2, "type": "text", "status": "sent", "text": ""},
        ],
    }
    rejected = kernos("send", "nowhere", "x", "--json", cwd=tmp_path)
    assert rejected.returncode == 2
    document = json.loads(rejected.stdout)
    assert (document["code"], document["items"]) == ("unknown_channel", [])
    assert document["error"].startswith("channel [nowhere] does not exist")
    assert rejected.stderr.startswith("error: channel [nowhere] does not exist")


def test_config_mistakes_are_exit_2(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text('[channels.log]\nkind = "file"\npath = "x"\nmode = "a"\n')
    result = kernos("channels", cwd=tmp_path)
    assert result.returncode == 2
    assert "channels.log.mode: unknown key 'mode' for channel 'log'" in result.stderr
    unknown_agent = kernos(
        "send", "log", "x", "--agent", "ghost", "-c", "kernos.toml", cwd=tmp_path
    )
    assert unknown_agent.returncode == 2
