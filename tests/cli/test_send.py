"""`kernos send` at a shell: a rejected call says why on stderr, in words for a person, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.cli.test_run import kernos
from tests.conftest import KERNOS

CONFIG = """
[agents.bot]
allowed_outputs = ["term"]

[channels.log]
kind = "file"
path = "out/log.jsonl"

[channels.term]
kind = "console"
"""


def test_an_unknown_channel_points_at_kernos_channels_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    result = kernos("send", "nosuch", "hi", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "error: channel [nosuch] does not exist or is unavailable; run `kernos channels` to list "
        "the configured channels\n"
    )
    assert "output_list_channels" not in result.stderr


def test_an_unauthorized_channel_says_what_to_change(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    result = kernos("send", "log", "hi", "--agent", "bot", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "error: channel [log] is not authorized for agent bot (its allowed_outputs in "
        "kernos.toml); send as another --agent or allow the channel there\n"
    )
    assert not (tmp_path / "out" / "log.jsonl").exists()


def test_types_repeated_for_one_payload_make_a_sentence_that_makes_sense(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    result = kernos("send", "log", "a", "-t", "text", "-t", "json", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "error: --type was given 2 times for 1 payload; give it once for all payloads or once "
        "per payload\n"
    )
    metas = kernos("send", "log", "a", "b", *("--meta", "x") * 3, cwd=tmp_path)
    assert metas.returncode == 2
    assert "--meta was given 3 times for 2 payloads;" in metas.stderr
    assert not (tmp_path / "out" / "log.jsonl").exists()


def test_other_rejections_go_to_stderr_too(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    result = kernos("send", "log", "a", " ", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("error: entry 2 of `payload` is ")


def test_markup_in_a_payload_sent_to_the_console_is_printed_as_written(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    result = kernos("send", "term", "deploy [/] done", "[mail]", "--agent", "bot", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ("[term] deploy [/] done\n[term] [mail]\nsent 2 messages via [term]\n")


def test_an_argument_that_is_not_utf_8_is_sent_with_u_fffd(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    env = {**os.environ, "KERNOS_HOME": str(tmp_path / ".kernos")}
    done = subprocess.run(
        [KERNOS.encode(), b"send", b"log", b"caf\xff"], cwd=tmp_path, env=env, capture_output=True
    )
    assert (done.returncode, done.stdout) == (0, b"ok\n"), done.stderr
    sent = json.loads((tmp_path / "out" / "log.jsonl").read_text("utf-8"))
    assert sent["payload"] == "caf\ufffd"
