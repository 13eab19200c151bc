"""`kernos compress` as a user runs it."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
from pathlib import Path

import pytest
from inline_snapshot import snapshot
from typer.testing import CliRunner, Result

from kernos.cli import app
from kernos.runtime import NO_MODEL_MESSAGE
from kernos.testing import FakeOpenAIServer, text
from tests._wait import wait_for
from tests.compress.conftest import MODEL, approving_agent, loss, rewrite
from tests.conftest import KERNOS

SOURCE = "You are a helpful assistant. Please always answer politely.\n"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, ["compress", *args])


@pytest.fixture
def files(workdir: Path) -> list[Path]:
    paths = [workdir / "a.md", workdir / "b.md"]
    for path in paths:
        path.write_text(SOURCE)
    return paths


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["-r", "0", "-n", "0", "-i", "-o", "x", "missing.md"],
            "--rounds must be a positive integer",
        ),
        (["-r", "-1", "missing.md"], "--rounds must be a positive integer"),
        (["-n", "0", "-i", "-o", "x", "missing.md"], "--agents must be a positive integer"),
        (["-i", "-o", "x", "missing.md"], "--in-place and --out are mutually exclusive"),
        (["a.md", "missing.md"], "Not a file: missing.md"),
        (["*.rst"], 'No files matched "*.rst"'),
        (["*.md"], "2 files matched; pass --in-place to rewrite them (--out takes a single file)"),
        (
            ["a.md", "b.md", "-o", "x"],
            "2 files matched; pass --in-place to rewrite them (--out takes a single file)",
        ),
        (["a.md"], NO_MODEL_MESSAGE),
    ],
)
def test_usage_errors_in_order_exit_2_before_any_session(
    openai_env: FakeOpenAIServer, files: list[Path], args: list[str], message: str
) -> None:
    model = [] if message == NO_MODEL_MESSAGE else ["-m", MODEL]
    result = invoke(*args, *model)
    assert result.exit_code == 2
    assert result.stderr == f"error: {message}\n"
    assert result.stdout == ""
    assert openai_env.requests == []
    assert all(p.read_text() == SOURCE for p in files)


def test_bad_tokenizer_is_a_usage_error(files: list[Path]) -> None:
    result = invoke("a.md", "--tokenizer", "gpt2", "-m", MODEL)
    assert result.exit_code == 2
    assert "gpt2" in result.stderr


def test_model_from_kernos_model(
    openai_env: FakeOpenAIServer, files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNOS_MODEL", "openai-chat:from-env")
    openai_env.script(*approving_agent("a.md", "Answer politely."))
    result = invoke("a.md")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[0] == "Compressing 1 file(s) with openai-chat:from-env"
    assert {r["model"] for r in openai_env.requests} == {"from-env"}


def test_stdout_mode_prints_only_the_approved_text(
    openai_env: FakeOpenAIServer, files: list[Path]
) -> None:
    openai_env.script(
        *approving_agent("a.md", "Answer politely.", [loss("helpful assistant", "framing")])
    )
    result = invoke("a.md", "-m", MODEL)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Answer politely.\n"
    assert result.stderr == snapshot("""\
Compressing 1 file(s) with openai-chat:test
  a.md: approved, 11 → 3 tok (72.7%), 1 draft(s), 1 loss(es)
    - helpful assistant
      framing
      wrote stdout
""")
    assert files[0].read_text() == SOURCE


def test_in_place_report_summary_json_and_exit_1(
    openai_env: FakeOpenAIServer, files: list[Path], workdir: Path
) -> None:
    long_loss = "x" * 250
    openai_env.script(
        *approving_agent("a.md", "Answer politely.", [loss(long_loss, "padding\nonly")]),
        rewrite("Be polite.", when="Compress the file b.md."),
        text("ok", when="recorded"),
        text("I am unsure.", when="\nBe polite.\n</draft-"),
    )
    (workdir / "empty.md").write_text("")
    result = invoke("*.md", "-i", "-m", MODEL, "--json", "report.json", "--tokenizer", "bytes")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"""\
Compressing 3 file(s) with openai-chat:test
  a.md: approved, 15 → 4 tok (73.3%), 1 draft(s), 1 loss(es)
    - {"x" * 200}…
      padding only
      wrote a.md
  b.md: unapproved, 15 → 3 tok (80.0%), 1 draft(s), 0 loss(es)
      nothing written: the review of draft 1 ended with neither a rewrite nor an approval
  empty.md: stalled, 0 → - tok (-), 0 draft(s), 0 loss(es)
      nothing written: no text to compress
Approved 1/3: 15 → 4 tokens (73.3% smaller)
"""
    )
    assert files[0].read_text() == "Answer politely.\n"
    assert files[1].read_text() == SOURCE
    report = json.loads((workdir / "report.json").read_text())
    assert report["model"] == "openai-chat:test"
    assert (report["approved"], report["total"]) == (1, 3)
    first = report["files"][0]
    assert first == {
        "path": str(files[0]),
        "status": "approved",
        "rounds": 1,
        "metrics": {
            "source_words": 9,
            "draft_words": 2,
            "source_tokens": 15,
            "draft_tokens": 4,
            "ratio": 0.733333,
        },
        "losses": [{"content": long_loss, "reason": "padding\nonly"}],
        "verdict": "Stands alone; every loss is safe.",
        "output": str(files[0]),
        "error": None,
    }
    assert report["files"][2]["status"] == "stalled"
    assert report["files"][2]["metrics"]["draft_tokens"] is None


def test_out_writes_one_file(
    openai_env: FakeOpenAIServer, files: list[Path], workdir: Path
) -> None:
    openai_env.script(*approving_agent("a.md", "Answer politely.\n\n"))
    result = invoke("a.md", "-o", "out/a.min.md", "-m", MODEL)
    assert result.exit_code == 1  # out/ does not exist: the write fails, the file is cancelled
    assert "a.md: cancelled" in result.stderr
    (workdir / "out").mkdir()
    openai_env.script(*approving_agent("a.md", "Answer politely.\n\n"))
    result = invoke("a.md", "-o", "out/a.min.md", "-m", MODEL)
    assert result.exit_code == 0, result.stderr
    assert (workdir / "out" / "a.min.md").read_text() == "Answer politely.\n\n"
    assert "      wrote out/a.min.md" in result.stderr
    assert result.stdout == ""


# -- real processes ------------------------------------------------------------------------------


def kernos(cwd: Path, server: FakeOpenAIServer) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("KERNOS_MODEL", "OPENAI_API_KEY")}
    return {**base, **server.env(), "KERNOS_HOME": str(cwd / ".kernos")}


def run_kernos(cwd: Path, server: FakeOpenAIServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KERNOS, *args],
        cwd=cwd,
        env=kernos(cwd, server),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_real_process_pipes_the_text_and_records_a_cassette(
    server: FakeOpenAIServer, workdir: Path
) -> None:
    (workdir / "p.md").write_text(SOURCE)
    server.script(*approving_agent("p.md", "Answer politely."))
    result = run_kernos(workdir, server, "compress", "p.md", "-m", MODEL, "--record", "c.json")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Answer politely.\n"
    cassette = (workdir / "c.json").read_text()
    assert [t.get("tool_calls", [{}])[0].get("name") for t in json.loads(cassette)["turns"]] == [
        "rewrite",
        None,
        "approve",
    ]
    assert "test-key" not in cassette
    # the cassette replays offline
    replayed = run_kernos(workdir, server, "compress", "p.md", "-m", "replay:c.json")
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == "Answer politely.\n"
    assert len(server.requests) == 3


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_run_leaves_every_file_intact(
    server: FakeOpenAIServer, workdir: Path, sig: signal.Signals
) -> None:
    server.delay = 2.0
    names = [f"f{i}.md" for i in range(4)]
    for name in names:
        (workdir / name).write_text(SOURCE)
        server.script(*approving_agent(name, "short"))
    process = subprocess.Popen(
        [KERNOS, "compress", "*.md", "-i", "-n", "2", "-m", MODEL],
        cwd=workdir,
        env=kernos(workdir, server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: len(server.requests) >= 2, "the run to reach the model", alive=[process])
        assert len(server.requests) == 2
        process.send_signal(sig)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 1, stderr
    assert stdout == ""
    assert "Interrupted: 4 file(s) cancelled; nothing half-written." in stderr
    assert stderr.count("cancelled, ") == 4
    assert sorted(n for n in os.listdir(workdir) if n != ".kernos") == names  # no temp files
    assert all((workdir / name).read_text() == SOURCE for name in names)


def test_a_progress_bar_is_drawn_on_a_terminal(server: FakeOpenAIServer, workdir: Path) -> None:

    server.delay = 0.2
    for name in ("a.md", "b.md"):
        (workdir / name).write_text(SOURCE)
        server.script(*approving_agent(name, "Answer politely."))
    leader, follower = pty.openpty()
    env = {**kernos(workdir, server), "TERM": "xterm", "COLUMNS": "100"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [KERNOS, "compress", "a.md", "b.md", "-i", "-m", MODEL],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=follower,
    )
    os.close(follower)
    captured = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        captured += chunk
    os.close(leader)
    assert process.wait(timeout=30) == 0
    process.stdout.close()  # type: ignore[union-attr]
    shown = captured.decode("utf-8", "replace")
    assert "compressing" in shown and "2/2" in shown
    assert "Approved 2/2" in shown


def test_an_unwritable_json_report_is_exit_1(
    openai_env: FakeOpenAIServer, files: list[Path]
) -> None:
    openai_env.script(*approving_agent("a.md", "Answer politely."))
    result = invoke("a.md", "-i", "-m", MODEL, "--json", "missing-dir/report.json")
    assert result.exit_code == 1
    assert "error: cannot write the --json report: " in result.stderr
    assert files[0].read_text() == "Answer politely.\n"
