"""A padded, stringified MCP call reaches the real server as the clean call, and its
repair receipt is in ``kernos -v run``'s stderr and the child's transcript — never in the text
the model reads."""

from __future__ import annotations

import json
from pathlib import Path

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.mcp.conftest import child_looks_up, kernos, recorded, recorder_config, tool_data

STRINGIFIED = {"query": "q", "limit": "2", "exact": "TRUE", "note": ""}
CLEAN = {"query": "q", "limit": 2, "exact": True}
CHILD_RECEIPT = "rec__lookup repaired: tags [] → absent (padding)"
PARENT_RECEIPT = (
    'rec__lookup repaired: limit "2" → 2 (coerced); exact "TRUE" → true (coerced); '
    'note "" → absent (padding)'
)


def test_a_repaired_call_shows_its_receipt_on_stderr_and_in_the_transcript(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    record = tmp_path / "calls.jsonl"
    server.script(
        *child_looks_up(tmp_path, record),
        tool_call("rec__lookup", json.dumps(STRINGIFIED), when="child done"),
        tool_call("rec__lookup", json.dumps(CLEAN), when="found 3 entries for 'q'"),
        text("all done", when="found 3 entries for 'q'"),
    )
    result = kernos(
        "-v", "run", "Look it up", "-m", "openai-chat:x", cwd=tmp_path, env=server.env()
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "all done\n"
    assert recorded(record) == [
        {"tool": "lookup", "arguments": {"query": "from child"}},
        {"tool": "lookup", "arguments": CLEAN},
        {"tool": "lookup", "arguments": CLEAN},
    ]
    receipts = [line for line in result.stderr.splitlines() if " repaired: " in line]
    assert len(receipts) == 2, result.stderr
    assert receipts[0].endswith(CHILD_RECEIPT)
    assert receipts[1] == f"main ~ {PARENT_RECEIPT}"
    # the model reads the same result for the repaired call as for the clean one
    results = [tool_data(r)[1] for r in server.tool_results() if r.startswith("<tool-result")]
    assert results[-2] == results[-1]
    assert "repaired" not in json.dumps(server.requests)

    listed = kernos("tasks", "list", "--json", cwd=tmp_path, env=server.env())
    (child,) = json.loads(listed.stdout)["tasks"]
    transcript = kernos("tasks", "output", child["id"], cwd=tmp_path, env=server.env())
    assert transcript.returncode == 0, transcript.stderr
    assert f"[normalized] {CHILD_RECEIPT}" in transcript.stdout.splitlines()


def test_without_v_no_receipt_line(server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(recorder_config("rec", tmp_path / "calls.jsonl"))
    server.script(
        tool_call("rec__lookup", json.dumps(STRINGIFIED)),
        text("done", when="found 3 entries"),
    )
    result = kernos("run", "Look it up", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert result.returncode == 0, result.stderr
    assert "repaired" not in result.stderr
    assert "→ rec__lookup" in result.stderr
