"""TaskManager behaviour with a scripted in-process model whose children block on gates, so
concurrency, FIFO queueing, cancellation, interrupts, task_output and the store are observable."""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests import _wait as wait

from kernos.boundary import ToolContext, call_tool
from kernos.runtime import Runtime, Session, Store, load_config
from kernos.tasks import (
    MIGRATIONS,
    TRANSITIONS,
    Residency,
    TaskManager,
    TaskStatus,
    TaskStore,
    can_move,
)


def latest_user(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        for part in getattr(message, "parts", []):
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                return part.content
    return ""


class Gates:
    """A child whose prompt contains ``GATE:<key>`` waits until ``open(key)``."""

    def __init__(self) -> None:
        self.events: dict[str, asyncio.Event] = {}
        self.started: list[str] = []

    def event(self, key: str) -> asyncio.Event:
        return self.events.setdefault(key, asyncio.Event())

    def open(self, key: str) -> None:
        self.event(key).set()

    async def model(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = latest_user(messages)
        if "GATE:" in prompt:
            key = prompt.split("GATE:", 1)[1].split()[0]
            self.started.append(key)
            await self.event(key).wait()
            return ModelResponse(parts=[TextPart(f"done {key}")])
        return ModelResponse(parts=[TextPart(f"echo {prompt[-40:]}")])


@pytest.fixture
def gates() -> Gates:
    return Gates()


@pytest.fixture
def rt(project: Path, gates: Gates, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    (project / "kernos.toml").write_text(
        (project / "kernos.toml").read_text().replace("concurrency = 5", "concurrency = 2")
    )
    runtime = Runtime(load_config(cwd=project))
    model = FunctionModel(gates.model)
    monkeypatch.setattr(runtime, "model", lambda name: model)
    yield runtime
    runtime.close()


async def call(session: Session, name: str, args: dict[str, Any]) -> Any:
    return await call_tool(session.tools[name], args, ToolContext(extras={"session": session}))


def parent(rt: Runtime, manager: TaskManager) -> Session:
    session = rt.session("main", record_turns=False)
    session.add_tools(manager.tools_for(session))
    return session


async def settle() -> None:
    """A moment for what should NOT happen to show (a child admitted beyond the limit, a
    notice): what must happen is waited for with :func:`until`. It orders no events: neither
    engine exposes a poll counter to wait for instead (its queue's next poll has no event)."""
    # the DBOS engine admits a child at its queue's next poll, after DBOS's launch
    await asyncio.sleep(1.5 if os.environ.get("KERNOS_TASK_ENGINE") == "dbos" else 0.1)


async def until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait for ``check`` to hold (a loaded machine may take seconds to launch DBOS)."""
    await wait.until(check, what, timeout)


async def test_concurrency_limit_queues_fifo_and_reports_positions(
    rt: Runtime, gates: Gates
) -> None:
    manager = TaskManager(rt)
    session = parent(rt, manager)
    batch = {
        "run_in_background": True,
        "category": "quick",
        "tasks": [{"prompt": f"GATE:{k}", "name": k} for k in "abcd"],
    }
    result = await call(session, "task", batch)
    assert result.text.splitlines()[1:] == [
        f"{n}. {k} {manager.find(session, k).id} ({s})"  # type: ignore[union-attr]
        for n, k, s in [(1, "a", "running"), (2, "b", "running"), (3, "c", "pending"),
                        (4, "d", "pending")]
    ]  # fmt: skip
    d = manager.find(session, "d")
    assert d is not None and manager.queue_position(d) == 2
    await until(lambda: len(gates.started) >= 2, "two children reach the model")
    await settle()
    # a and b are admitted together: which reaches the model first is up to the engine (DBOS
    # starts the runs one poll dequeues side by side); admission is FIFO, so c goes before d
    assert sorted(gates.started) == ["a", "b"]
    gates.open("b")
    await until(lambda: len(gates.started) >= 3, "a third child reaches the model")
    await settle()  # no fourth: d waits for a or c
    assert sorted(gates.started[:2]) == ["a", "b"] and gates.started[2:] == ["c"]
    for key in "acd":
        gates.open(key)
    await manager.wait_all()
    assert {r.status for r in manager.children(session)} == {TaskStatus.COMPLETED}
    await manager.aclose()


@pytest.mark.skipif(
    os.environ.get("KERNOS_TASK_ENGINE") == "dbos",
    reason="on the DBOS engine a queued child has no executor until a process dequeues it",
)
async def test_a_child_shown_running_names_its_executor_in_the_same_write(
    rt: Runtime, gates: Gates
) -> None:
    # the local engine marks a child running as it spawns it, in this process: a crash between
    # a write of the status and one of the executor left a running row naming no executor
    manager = TaskManager(rt)
    session = parent(rt, manager)
    await call(session, "task", {"prompt": "GATE:e", "category": "quick", "name": "e",
                                 "run_in_background": True})  # fmt: skip
    record = manager.find(session, "e")
    assert record is not None
    manager.store.flush()
    row = manager.store.get(record.id)
    assert row is not None and row["status"] == "running"
    assert row["executor"] == f"{socket.gethostname()}:{os.getpid()}"
    gates.open("e")
    await manager.wait_all()
    await manager.aclose()


async def test_cancel_stops_the_child_and_sends_no_notice(rt: Runtime, gates: Gates) -> None:
    manager = TaskManager(rt)
    session = parent(rt, manager)
    await call(session, "task", {"prompt": "GATE:x", "category": "quick", "name": "x",
                                 "run_in_background": True})  # fmt: skip
    await until(lambda: gates.started == ["x"], "x reaches the model")
    answer = await call(session, "task_cancel", {"name": "x", "reason": "changed my mind"})
    record = manager.find(session, "x")
    assert record is not None
    assert answer.text == f"Cancelled {record.id}; it was stopped and will not report back."
    await manager.wait_all()
    assert record.status == TaskStatus.CANCELLED
    again = await call(session, "task_cancel", {"task_id": record.id})
    assert again.text == f"{record.id} is cancelled; nothing changed."
    await settle()
    assert session.pending_messages == 0  # no completion notice
    send = await call(session, "task_send", {"to": "x", "message": "more"})
    assert send.code == "not_continuable"
    await manager.aclose()


async def test_foreground_batch_waits_and_reports_each_item(rt: Runtime, gates: Gates) -> None:
    manager = TaskManager(rt)
    session = parent(rt, manager)
    waiting = asyncio.ensure_future(
        call(session, "task", {"subagent_type": "explore", "tasks": [
            {"prompt": "GATE:p", "task_summary": "first"}, {"prompt": "GATE:q"}]})
    )  # fmt: skip
    await until(lambda: sorted(gates.started) == ["p", "q"], "both children reach the model")
    assert not waiting.done()  # the call waits for its children
    gates.open("p")
    gates.open("q")
    result = await waiting
    assert (
        result.text
        == "Batch completed.\n1. first (completed): done p\n2. GATE:q (completed): done q"
    )
    assert session.pending_messages == 0  # foreground children send no notices
    await manager.aclose()


async def test_interrupt_task_output_and_unknown_names(rt: Runtime, gates: Gates) -> None:
    manager = TaskManager(rt)
    session = parent(rt, manager)
    await call(session, "task", {"prompt": "GATE:i", "subagent_type": "explore", "name": "i",
                                 "run_in_background": True})  # fmt: skip
    await until(lambda: gates.started == ["i"], "i reaches the model")
    record = manager.find(session, "i")
    assert record is not None
    sent = await call(session, "task_send", {"to": "i", "message": "also this"})
    assert sent.text == f"Delivered to {record.id}; it reads the message after its current turn."
    stop = await call(session, "task_send", {"to": "i", "deliver_as": "interrupt"})
    assert stop.text == f"Interrupting {record.id}: it stops after its current step."
    gates.open("i")
    await manager.wait_all()
    assert record.status == TaskStatus.INTERRUPTED
    status = await call(session, "task_output", {"task_id": record.id})
    assert status.text.splitlines()[0] == f"{record.id} interrupted (resident, run epoch 1)"
    tail = await call(session, "task_output", {"name": "i", "mode": "tail", "tail_lines": 2})
    assert tail.text.splitlines()[-1] == "[status] running → interrupted (run epoch 1)"
    full = await call(session, "task_output", {"name": "i", "mode": "full"})
    assert "[assistant] done i" in full.text and "GATE:i" in full.text
    unknown = await call(session, "task_output", {"task_id": "t_00000000"})
    assert unknown.code == "unknown_task" and f"{record.id} (i) interrupted" in unknown.text
    await manager.aclose()
    assert record.residency == Residency.EVICTED  # settled: a later run may continue it


async def test_names_are_unique_per_parent_and_depth_limit_holds(rt: Runtime) -> None:
    manager = TaskManager(rt)
    session = parent(rt, manager)
    first = await call(session, "task", {"prompt": "hi", "category": "quick", "name": "n"})
    assert first.text.startswith("echo")
    taken = await call(session, "task", {"prompt": "hi", "category": "quick", "name": "n"})
    assert taken.code == "name_taken"
    child = manager.find(session, "n")
    assert child is not None and child.session is not None
    assert not set(child.session.tools) & {"task", "task_send", "task_output", "task_cancel"}
    await manager.aclose()


async def test_skills_are_prepended_and_missing_ones_reported(rt: Runtime, tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    (skills / "audit").mkdir(parents=True)
    (skills / "audit" / "SKILL.md").write_text("Check every field.\n")
    manager = TaskManager(rt, skill_dirs=[skills])
    session = parent(rt, manager)
    result = await call(session, "task", {"prompt": "go", "category": "quick",
                                          "load_skills": ["audit", "nope", "../x"]})  # fmt: skip
    assert "Missing skills: nope, ../x." in result.text
    (record,) = manager.children(session)
    first = manager.store.events(record.id)
    prompt = next(e["payload"]["text"] for e in first if e["type"] == "message")
    assert '<skill name="audit">\nCheck every field.\n</skill>\n\ngo' in prompt
    await manager.aclose()


async def test_secrets_are_redacted_in_events(rt: Runtime) -> None:
    manager = TaskManager(rt)
    session = parent(rt, manager)
    await call(session, "task", {"prompt": "key sk-abcdefghijklmnop", "category": "quick"})
    (record,) = manager.children(session)
    events = manager.store.events(record.id)
    assert "sk-abcdefghijklmnop" not in str(events)
    await manager.aclose()


def test_transition_table() -> None:
    assert can_move(TaskStatus.PENDING, TaskStatus.RUNNING)
    assert can_move(TaskStatus.COMPLETED, TaskStatus.RUNNING)  # revive
    assert not can_move(TaskStatus.CANCELLED, TaskStatus.RUNNING)
    assert not can_move(TaskStatus.LOST, TaskStatus.COMPLETED)
    assert not can_move(TaskStatus.PENDING, TaskStatus.COMPLETED)
    assert set(TRANSITIONS) == set(TaskStatus)


async def test_a_transition_on_a_final_record_is_ignored_and_logged(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    manager = TaskManager(rt)
    session = parent(rt, manager)
    await call(session, "task", {"prompt": "hi", "category": "quick"})
    (record,) = manager.children(session)
    record.status = TaskStatus.LOST
    assert manager.scheduler.move(record, TaskStatus.COMPLETED) is False
    assert record.status == TaskStatus.LOST
    assert "ignored transition lost → completed" in caplog.text
    assert manager.store.events(record.id)[-1]["type"] == "transition_ignored"
    await manager.aclose()


def test_migrations_from_blank_and_from_the_previous_version(tmp_path: Path) -> None:
    blank = Store(tmp_path / "blank.db")
    TaskStore(blank)
    assert blank.versions("tasks") == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    blank.close()
    old = Store(tmp_path / "old.db")
    old.migrate("tasks", MIGRATIONS[:1])
    old.execute(
        "INSERT INTO tasks (id, parent_session, target_kind, target, model, status, residency,"
        " created_at, updated_at, owner_pid) VALUES ('t_0badf00d', 's_1', 'agent', 'explore',"
        " 'm', 'running', 'resident', 0, 0, 999999999)"
    )
    store = TaskStore(old)
    assert old.versions("tasks") == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert store.reconcile() == ["t_0badf00d"]  # that pid does not exist
    row = store.get("t_0badf00d")
    assert row is not None and row["status"] == "lost" and row["cancel_requested"] == 0
    old.close()
    with sqlite3.connect(tmp_path / "old.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
