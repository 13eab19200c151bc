"""`kernos run --json`: one document on stdout at the end, for scripts; failures too."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.cli.test_run import kernos

KEYS = [
    "answer", "session_id", "agent", "model", "usage", "cost", "children", "error", "exit_code",
]  # fmt: skip
CHILD = [
    "id", "parent_session", "child_session", "target_kind", "target", "name", "label", "model",
    "status", "error",
]  # fmt: skip


def _document(stdout: str) -> dict[str, Any]:
    """stdout is exactly one JSON document and its newline."""
    assert stdout.endswith("\n") and stdout.count("\n") == 1, stdout
    document: dict[str, Any] = json.loads(stdout)
    assert list(document) == KEYS
    return document


def test_one_document_with_answer_session_usage_and_children(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text('[agents.explore]\ndescription = "Read-only"\n')
    server.script(
        tool_call("task", {"prompt": "TASK: count", "subagent_type": "explore", "name": "counter"}),
        text("child says 3", when="TASK: count"),
        text("The answer is 3.", when="child says 3"),
    )
    result = kernos("run", "count", "-m", "openai-chat:x", "--json", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    document = _document(result.stdout)  # streamed text never reaches stdout
    assert document["answer"] == "The answer is 3."
    assert (document["agent"], document["model"]) == ("main", "openai-chat:x")
    assert (document["error"], document["exit_code"]) == (None, 0)
    assert document["usage"]["requests"] == 3  # the parent's two and the child's one
    assert document["usage"]["input_tokens"] > 0 and document["usage"]["output_tokens"] > 0
    assert document["cost"] is None  # model x is not in genai-prices' data
    (child,) = document["children"]
    assert list(child) == CHILD
    assert (child["parent_session"], child["status"], child["name"]) == (
        document["session_id"],
        "completed",
        "counter",
    )
    assert child["id"] in kernos("tasks", "list", cwd=tmp_path).stdout
    listed = json.loads(kernos("sessions", "--json", cwd=tmp_path).stdout)["sessions"]
    assert [s["id"] for s in listed] == [document["session_id"]]


def test_a_failed_run_is_the_document_with_its_error_and_exit_code(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    env = {**server.env(), "OPENAI_MAX_RETRIES": "0"}  # nothing scripted: every request fails
    result = kernos("run", "hi", "-m", "openai-chat:x", "--json", cwd=tmp_path, env=env)
    assert result.returncode == 1
    document = _document(result.stdout)
    assert document["error"].startswith("the run failed: ")
    assert document["error"] in result.stderr  # the same line a person reads
    assert document["exit_code"] == 1
    assert document["session_id"].startswith("s_")


def test_a_usage_error_is_the_document_too(tmp_path: Path) -> None:
    result = kernos("run", "hello", "--json", cwd=tmp_path)  # no model anywhere
    assert result.returncode == 2
    document = _document(result.stdout)
    assert document["error"].startswith("no model configured: pass --model")
    assert (document["exit_code"], document["session_id"], document["answer"]) == (2, None, None)
    assert document["usage"] == {
        "requests": 0, "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0,
    }  # fmt: skip


def test_a_timed_out_run_names_its_session_and_exits_124(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    never = threading.Event()
    server.script(text("too late", hold=never))
    try:
        result = kernos(
            "run", "hi", "-m", "openai-chat:x", "--json", "--timeout", "1s",
            cwd=tmp_path, env=server.env(),
        )  # fmt: skip
    finally:
        never.set()
    assert result.returncode == 124
    document = _document(result.stdout)
    assert "reached its --timeout of 1s" in document["error"]
    assert document["session_id"].startswith("s_")


def test_help_documents_the_keys(tmp_path: Path) -> None:
    shown = " ".join(kernos("run", "--help", cwd=tmp_path, env={"COLUMNS": "200"}).stdout.split())
    for key in ["answer", "session_id", "usage", "cost", "children", "error", "exit_code"]:
        assert key in shown
