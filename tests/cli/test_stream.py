"""Streaming: `kernos run` writes the answer to stdout as it arrives; --no-stream
writes it once; stderr activity is unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests import _cli


def kernos(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "KERNOS_HOME": str(cwd / ".kernos"), **env}
    return _cli.kernos(*args, cwd=cwd, env=full, timeout=60)


def _script(server: FakeOpenAIServer) -> None:
    server.script(
        tool_call("task_output", {"task_id": "t_none"}),
        text("The answer, streamed in pieces."),
    )


def test_run_streams_the_answer_and_keeps_stderr(server: FakeOpenAIServer, tmp_path: Path) -> None:
    _script(server)
    streamed = kernos("run", "go", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert streamed.returncode == 0, streamed.stderr
    assert streamed.stdout == "The answer, streamed in pieces.\n"
    assert [r["stream"] for r in server.requests] == [True, True]
    _script(server)
    whole = kernos(
        "run", "go", "-m", "openai-chat:x", "--no-stream", cwd=tmp_path, env=server.env()
    )
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout == streamed.stdout
    assert [r["stream"] for r in server.requests[2:]] == [False, False]
    assert whole.stderr == streamed.stderr  # the activity lines and the token total


def test_text_beside_a_tool_call_is_shown_then_the_final_answer(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    from kernos.testing import Reply

    server.script(
        Reply(content="Let me look.", calls=(("task_output", '{"task_id": "t_none"}'),)),
        text("Nothing is running."),
    )
    result = kernos("run", "go", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Let me look.\nNothing is running.\n"


def test_a_cassette_that_cannot_stream_still_prints_the_answer(tmp_path: Path) -> None:
    cassette = tmp_path / "c.json"
    cassette.write_text(json.dumps({"version": 1, "turns": [{"text": "replayed answer"}]}))
    result = kernos("run", "go", "-m", f"replay:{cassette}", cwd=tmp_path, env={})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "replayed answer\n"


class _Broken(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b'data: {"choices": [{"index": 0, "delta": {"content": "Hal')
        self.wfile.write(b'f"}}]}\n\ndata: {"choices": "garbage"\n\n')


@pytest.fixture
def broken() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Broken)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_a_malformed_stream_fails_the_run_with_one_line(broken: str, tmp_path: Path) -> None:
    env = {"OPENAI_BASE_URL": broken, "OPENAI_API_KEY": "k"}
    result = kernos("run", "go", "-m", "openai-chat:x", cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert result.stdout == "Half\n"  # what arrived before the bad chunk, ended cleanly
    assert "Traceback" not in result.stderr
    [line] = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert "ModelResponseError: the model server sent a stream chunk that is not JSON" in line
