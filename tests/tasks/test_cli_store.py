"""``kernos tasks`` in-process over a store the test writes: an unknown id is exit 2, and
``tasks show`` prints readable lines, never Python dict text."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernos.cli import app
from kernos.runtime import Store
from kernos.tasks import TaskStore


@pytest.fixture
def stored(project: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(project)
    tasks = TaskStore(Store.open(project / ".kernos"))
    row = {"id": "t_0000beef", "parent_session": "s_1", "target_kind": "agent",
           "target": "explore", "model": "openai-chat:test", "status": "running",
           "residency": "resident", "label": "survey", "created_at": time.time()}  # fmt: skip
    tasks.insert(row)
    tasks.event("t_0000beef", "status", {"from": None, "to": "pending", "epoch": 1})
    tasks.event("t_0000beef", "status", {"from": "pending", "to": "running", "epoch": 1})
    tasks.update("t_0000beef", status="completed", final_text="3 modules", finished_at=time.time())
    tasks.event("t_0000beef", "status", {"from": "running", "to": "completed", "epoch": 1})
    tasks.event("t_0000beef", "revived", {"epoch": 2})
    tasks.event("t_0000beef", "residency", {"to": "disposed"})
    tasks.store.close()
    return "t_0000beef"


@pytest.mark.parametrize("command", ["show", "output", "cancel"])
def test_an_unknown_task_id_is_exit_2(stored: str, command: str) -> None:
    result = CliRunner().invoke(app, ["tasks", command, "t_00000000"])
    assert result.exit_code == 2
    assert result.stderr == "error: no task t_00000000 in the store; see `kernos tasks list`\n"


def test_show_prints_readable_history(stored: str) -> None:
    result = CliRunner().invoke(app, ["tasks", "show", stored])
    assert result.exit_code == 0, result.stderr
    history = result.stdout.split("history:\n", 1)[1].splitlines()
    assert [line.split(" ", 4)[-1] for line in history] == [
        "[status] created → pending (run epoch 1)",
        "[status] pending → running (run epoch 1)",
        "[status] running → completed (run epoch 1)",
        "[revived] epoch=2",
        "[residency] to=disposed",
    ]
    assert "{" not in result.stdout and "'" not in result.stdout


def test_a_finished_task_cannot_be_cancelled_and_says_so(stored: str) -> None:
    result = CliRunner().invoke(app, ["tasks", "cancel", stored])
    assert result.exit_code == 1
    assert "t_0000beef is completed; nothing changed" in result.stderr
