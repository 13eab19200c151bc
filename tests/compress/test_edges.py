"""Compress edges: crash leftovers, read-only files, owners, huge and blank sources."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from kernos.cli import app
from kernos.compress import CompressError, CompressProtocol, resolve_targets
from kernos.compress._write import STALE_AFTER, is_stale_temp_file, remove_stale_temp_files
from kernos.testing import FakeOpenAIServer
from tests.compress.conftest import MODEL, approving_agent

SOURCE = "You are a helpful assistant. Please always answer politely.\n"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, ["compress", *args])


def requested_files(server: FakeOpenAIServer) -> set[str]:
    first_turns = [r["messages"][1]["content"] for r in server.requests if len(r["messages"]) == 2]
    return {line.split("Compress the file ")[1].split(".")[0] for line in first_turns}


# -- (a) a SIGKILL mid-write leaves a temp file: never a target, removed later ---------------------

KILLED_WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from kernos.compress._write import atomic_write

    def stall(fd):
        print("writing", flush=True)
        time.sleep(120)  # a write that stalls (the test kills it): not a wait

    os.fsync = stall
    atomic_write(Path(sys.argv[1]), "half of a new text")
""")


def kill_mid_write(target: Path) -> Path:
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(target)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    assert writer.stdout.readline() == "writing\n"
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    writer.stdout.close()
    left = [p for p in target.parent.iterdir() if p.name.endswith(".kernos-tmp")]
    assert len(left) == 1, "the killed writer should have left its temporary file"
    return left[0]


def test_a_temp_file_left_by_a_kill_is_not_compressed_and_is_removed(
    openai_env: FakeOpenAIServer, workdir: Path
) -> None:
    prompts = workdir / "prompts"
    prompts.mkdir()
    (prompts / "a.md").write_text(SOURCE)
    leftover = kill_mid_write(prompts / "a.md")
    assert (prompts / "a.md").read_text() == SOURCE
    openai_env.script(*approving_agent("prompts/a.md", "Answer politely."))
    result = invoke("prompts/*", "-i", "-m", MODEL, "--json", "report.json")
    assert result.exit_code == 0, result.stderr
    report = json.loads((workdir / "report.json").read_text())
    assert [f["path"] for f in report["files"]] == [str(prompts / "a.md")]
    assert requested_files(openai_env) == {"prompts/a"}
    assert not leftover.exists(), "the stale temporary file should be removed"
    assert sorted(p.name for p in prompts.iterdir()) == ["a.md"]


def test_temp_files_are_never_targets_even_by_name_or_dot_glob(workdir: Path) -> None:
    (workdir / "a.md").write_text(SOURCE)
    temp = workdir / ".a.md.4242.abcd_123.kernos-tmp"
    temp.write_text("half")
    assert resolve_targets(["*", "**/*", "{.,}*"]) == [workdir / "a.md"]
    with pytest.raises(CompressError, match=re.escape('No files matched ".*"')):
        resolve_targets([".*"])
    with pytest.raises(CompressError, match="kernos temporary file"):
        resolve_targets([temp.name])
    with pytest.raises(CompressError, match=re.escape('No files matched ".*.kernos-tmp"')):
        resolve_targets([".*.kernos-tmp"])


def test_only_stale_kernos_temp_files_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    old = time.time() - STALE_AFTER - 60
    files = {
        "dead_writer": f".a.md.{dead.pid}.abcd1234.kernos-tmp",
        "live_writer": f".a.md.{os.getppid()}.abcd1234.kernos-tmp",
        "own_writer": f".a.md.{os.getpid()}.abcd1234.kernos-tmp",
        "live_but_old": f".b.md.{os.getppid()}.abcd1234.kernos-tmp",
        "no_pid_young": ".c.md.abcd1234.kernos-tmp",
        "no_pid_old": ".d.md.abcd1234.kernos-tmp",
        "not_ours": ".e.md.tmp",
        "not_ours_old": "notes.kernos-tmp",
        "prompt": "a.md",
    }
    for name in files.values():
        (tmp_path / name).write_text("x")
    for key in ("live_but_old", "no_pid_old", "not_ours_old"):
        os.utime(tmp_path / files[key], (old, old))
    removed = remove_stale_temp_files([tmp_path])
    assert sorted(p.name for p in removed) == sorted(
        files[k] for k in ("dead_writer", "live_but_old", "no_pid_old")
    )
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {
        files[k]
        for k in ("live_writer", "own_writer", "no_pid_young", "not_ours", "not_ours_old", "prompt")
    }
    (tmp_path / "dir.1.abcd1234.kernos-tmp").mkdir()
    assert not is_stale_temp_file(tmp_path / "dir.1.abcd1234.kernos-tmp")


# -- (b) read-only files are refused with -i unless --force; owner and group are kept -------------


def test_a_read_only_file_is_refused_without_a_request(
    openai_env: FakeOpenAIServer, workdir: Path
) -> None:
    ro, rw = workdir / "ro.md", workdir / "rw.md"
    ro.write_text(SOURCE)
    rw.write_text(SOURCE)
    ro.chmod(0o444)
    openai_env.script(*approving_agent("rw.md", "Answer politely."))
    result = invoke("*.md", "-i", "-m", MODEL, "--json", "report.json")
    assert result.exit_code == 1
    assert ro.read_text() == SOURCE
    assert rw.read_text() == "Answer politely.\n"
    assert requested_files(openai_env) == {"rw"}
    entry = json.loads((workdir / "report.json").read_text())["files"][0]
    assert entry["path"] == str(ro)
    assert entry["status"] == "cancelled"
    assert entry["error"].startswith("read-only: ")
    assert "--force" in entry["error"]
    assert "ro.md: cancelled" in result.stderr


def test_force_replaces_a_read_only_file_keeping_its_mode(
    openai_env: FakeOpenAIServer, workdir: Path
) -> None:
    ro = workdir / "ro.md"
    ro.write_text(SOURCE)
    ro.chmod(0o444)
    openai_env.script(*approving_agent("ro.md", "Answer politely."))
    result = invoke("ro.md", "-i", "--force", "-m", MODEL)
    assert result.exit_code == 0, result.stderr
    assert ro.read_text() == "Answer politely.\n"
    assert stat.S_IMODE(ro.stat().st_mode) == 0o444


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may give a file to another user")
def test_in_place_keeps_the_owner_and_group(openai_env: FakeOpenAIServer, workdir: Path) -> None:
    source = workdir / "a.md"
    source.write_text(SOURCE)
    os.chown(source, 4321, 8765)
    openai_env.script(*approving_agent("a.md", "Answer politely."))
    result = invoke("a.md", "-i", "-m", MODEL)
    assert result.exit_code == 0, result.stderr
    assert source.read_text() == "Answer politely.\n"
    info = source.stat()
    assert (info.st_uid, info.st_gid) == (4321, 8765)


# -- (c) --max-tokens: a larger file fails before any request --------------------------------------


def test_a_file_over_max_tokens_fails_before_any_request(
    openai_env: FakeOpenAIServer, workdir: Path
) -> None:
    (workdir / "big.md").write_text("word " * 200)
    (workdir / "huge.md").write_text("x" * 60 * 256)  # refused by size, never read
    (workdir / "small.md").write_text(SOURCE)
    openai_env.script(*approving_agent("small.md", "Answer politely."))
    result = invoke("*.md", "-i", "-m", MODEL, "--max-tokens", "50", "--json", "report.json")
    assert result.exit_code == 1
    assert requested_files(openai_env) == {"small"}
    files = {Path(f["path"]).name: f for f in json.loads(Path("report.json").read_text())["files"]}
    assert files["big.md"]["status"] == "cancelled"
    assert files["big.md"]["error"].startswith("too large: 201 tokens, over --max-tokens 50")
    assert files["huge.md"]["status"] == "cancelled"
    assert files["huge.md"]["error"].startswith("too large: 15360 bytes, over --max-tokens 50")
    assert files["small.md"]["status"] == "approved"
    assert (workdir / "big.md").read_text() == "word " * 200


def test_the_default_cap_is_100k_tokens(openai_env: FakeOpenAIServer, workdir: Path) -> None:
    (workdir / "big.md").write_text("word " * 100_001)
    result = invoke("big.md", "-m", MODEL, "--tokenizer", "bytes")
    assert result.exit_code == 1
    assert "too large: 125002 tokens, over --max-tokens 100000" in result.stderr
    assert openai_env.requests == []


def test_max_tokens_must_be_positive(openai_env: FakeOpenAIServer, workdir: Path) -> None:
    (workdir / "a.md").write_text(SOURCE)
    result = invoke("a.md", "-m", MODEL, "--max-tokens", "0")
    assert result.exit_code == 2
    assert result.stderr == "error: --max-tokens must be a positive integer\n"


def test_help_names_the_new_flags() -> None:
    shown = invoke("--help").stdout
    assert "--force" in shown and "--max-tokens" in shown


# -- (d) a blank source is 0 words and 0 tokens ----------------------------------------------------


@pytest.mark.parametrize("tokenizer", ["o200k", "bytes"])
def test_a_blank_text_counts_zero_words_and_tokens(tokenizer: str) -> None:
    protocol = CompressProtocol("   \n", tokenizer=tokenizer)
    assert (protocol.source_words, protocol.source_tokens) == (0, 0)
    metrics = protocol.metrics(protocol.submit(" \n\t", []))
    assert (metrics.draft_words, metrics.draft_tokens, metrics.ratio) == (0, 0, 0.0)
    real = CompressProtocol("Answer politely.", tokenizer=tokenizer)
    assert real.source_tokens > 0
