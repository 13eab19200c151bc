"""`kernos demo` runs offline through the real code paths."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tests import _cli


def test_demo_runs_offline_and_reports_what_happened(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "KERNOS_"))}
    # an unroutable proxy: any attempt to reach the network would fail the demo
    env.update(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
    workspace = tmp_path / "ws"
    result = _cli.kernos("demo", "--workspace", str(workspace), cwd=tmp_path, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    stdout = result.stdout
    assert "replayed from bundled cassettes" in stdout
    # a padded call to a built-in (non-task) tool, before and after normalization, and its result
    assert (
        '  model → read_file {"path": "release_prompt.md", "offset": "", "limit": null}\n'
        '  kernos normalized → {"path": "release_prompt.md"}\n'
        "  kernos ← ✓ release_prompt.md (22 lines): 1 # Release assistant 2 3 You are"
    ) in stdout
    # the padded single call was normalized exactly as the seed scenario S1 says
    # (tests/tasks/tasks_helpers.py)
    assert (
        'kernos normalized → {"prompt": "TASK: Audit the task tool boundary.", "description": '
        '"Audit task tool", "subagent_type": "explore", "run_in_background": true, '
        '"name": "task-padding-audit"}'
    ) in stdout
    assert "Provide EITHER prompt OR tasks" not in stdout
    task_lines = re.findall(r"^  (t_[0-9a-f]{8})  (\w+)", stdout, flags=re.M)
    assert len(task_lines) == 3 and {status for _, status in task_lines} == {"completed"}
    assert "  sent 2/3 messages via [log]:\n  [1] text ok\n  [2] json failed:" in stdout
    lines = (workspace / "out" / "log.jsonl").read_text().splitlines()
    assert [json.loads(line)["payload"] for line in lines] == [
        "release audit started",
        "release audit finished",
    ]
    assert re.search(r"approved: \d+ → \d+ words, \d+ → \d+ tokens o200k_base", stdout)
    assert "declared loss: Please always be polite and friendly" in stdout
    written = (workspace / "release_prompt.min.md").read_text()
    assert "`Release {{version}}: {{summary}}`" in written and written.endswith(".\n")
    assert "kernos run" in stdout and "-m openai-chat:MODEL" in stdout
