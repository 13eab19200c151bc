"""Children outlive their run: a settled child is ``evicted`` at close, and a later manager
(another process, the same store) takes it in for the continued parent session and rebuilds it
from the store — agent, model, granted tools and turns — when ``task_send`` revives it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from kernos.boundary import ToolContext, ToolSpec, call_tool
from kernos.runtime import Runtime, Session, load_config
from kernos.tasks import Residency, TaskManager, TaskStatus

PARENT = "s_0000a11e"


class NoteArgs(BaseModel):
    text: str


async def _note(params: NoteArgs, ctx: Any) -> str:
    return "noted"


NOTE = ToolSpec(name="note", description="Take a note.", params=NoteArgs, execute=_note)


class Echo:
    """A model that answers ``echo <latest user text>`` and keeps every request it got."""

    def __init__(self) -> None:
        self.requests: list[list[ModelMessage]] = []

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        return ModelResponse(parts=[TextPart(f"echo {user_texts(messages)[-1][-30:]}")])


def user_texts(messages: list[ModelMessage]) -> list[str]:
    return [
        part.content
        for message in messages
        for part in getattr(message, "parts", [])
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]


@pytest.fixture
def echo() -> Echo:
    return Echo()


@pytest.fixture
def rt(project: Path, echo: Echo, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    runtime = Runtime(load_config(cwd=project))
    model = FunctionModel(echo)
    monkeypatch.setattr(runtime, "model", lambda name: model)
    yield runtime
    runtime.close()


def parent(rt: Runtime, manager: TaskManager) -> Session:
    """The top-level session ``PARENT`` (the same id in every run: a continued session)."""
    session = rt.session("main", session_id=PARENT, tools=[NOTE])
    session.add_tools(manager.tools_for(session))
    return session


async def call(session: Session, name: str, args: dict[str, Any]) -> Any:
    return await call_tool(session.tools[name], args, ToolContext(extras={"session": session}))


async def first_run(rt: Runtime) -> str:
    manager = TaskManager(rt)
    session = parent(rt, manager)
    await call(session, "task", {"prompt": "Count the modules.", "subagent_type": "explore",
                                 "name": "counter", "tools": ["note"],
                                 "run_in_background": True})  # fmt: skip
    await manager.wait_all()
    record = manager.find(session, "counter")
    assert record is not None and record.status == TaskStatus.COMPLETED
    await manager.aclose()
    assert (record.residency, record.session) == (Residency.EVICTED, None)
    return record.id


async def test_a_later_run_revives_a_child_rebuilt_from_the_store(rt: Runtime, echo: Echo) -> None:
    task_id = await first_run(rt)
    manager = TaskManager(rt)  # a later process: nothing in memory
    session = parent(rt, manager)
    record = manager.find(session, "counter")
    assert record is not None and record.id == task_id
    assert (record.status, record.residency, record.session) == (
        TaskStatus.COMPLETED,
        Residency.EVICTED,
        None,
    )
    taken = await call(session, "task", {"prompt": "x", "category": "quick", "name": "counter"})
    assert taken.code == "name_taken"
    sent = await call(session, "task_send", {"to": "counter", "message": "And the tests?"})
    assert sent.text == f"Revived {task_id} (run epoch 2)."
    await manager.wait_all()
    assert record.status == TaskStatus.COMPLETED and record.final_text == "echo And the tests?"
    assert record.session is not None and record.session.agent == "explore"
    assert sorted(record.session.tools) == ["note"]  # its grant, from the store
    said = user_texts(echo.requests[-1])
    assert said[-1] == "And the tests?" and "Count the modules." in said[0]
    answers = [
        part.content
        for message in echo.requests[-1]
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, TextPart)
    ]
    assert answers == [f"echo {said[0][-30:]}"]  # its own answer of the first run
    await manager.aclose()
    assert record.residency == Residency.EVICTED


async def test_an_evicted_child_without_stored_turns_is_not_continuable(rt: Runtime) -> None:
    task_id = await first_run(rt)
    rt.store.execute("DELETE FROM turns WHERE session_id = ?", ("s_" + task_id[2:],))
    manager = TaskManager(rt)
    session = parent(rt, manager)
    refused = await call(session, "task_send", {"to": task_id, "message": "again"})
    assert refused.code == "not_continuable"
    assert f"{task_id} is completed (evicted) and cannot be continued" in refused.text
    assert manager.store.events(task_id)[-1]["payload"] == {
        "why": "its conversation is not in the store"
    }
    await manager.aclose()


async def test_evicted_in_the_same_run_is_rebuilt_too(rt: Runtime, echo: Echo) -> None:
    manager = TaskManager(rt)
    session = parent(rt, manager)
    await call(session, "task", {"prompt": "Count.", "category": "quick", "name": "c",
                                 "run_in_background": True})  # fmt: skip
    await manager.wait_all()
    record = manager.find(session, "c")
    assert record is not None
    manager.scheduler.evict(record)
    assert (record.residency, record.session) == (Residency.EVICTED, None)
    sent = await call(session, "task_send", {"to": "c", "message": "Again."})
    assert sent.text == f"Revived {record.id} (run epoch 2)."
    await manager.wait_all()
    assert record.final_text == "echo Again." and record.residency == Residency.RESIDENT
    await manager.aclose()


async def test_a_revived_run_does_not_name_the_executor_of_an_earlier_run(rt: Runtime) -> None:
    # the earlier run's executor is gone: were the revived (running) row still to name it, a
    # reaper would take the new run for one of a dead executor and end it lost
    task_id = await first_run(rt)
    rt.store.execute("UPDATE tasks SET executor = 'gone-host:1' WHERE id = ?", (task_id,))
    manager = TaskManager(rt)
    session = parent(rt, manager)
    sent = await call(session, "task_send", {"to": "counter", "message": "And the tests?"})
    assert sent.text == f"Revived {task_id} (run epoch 2)."
    manager.store.flush()
    assert manager.store.dead_executors(0) == []
    await manager.wait_all()
    record = manager.find(session, "counter")
    assert record is not None and record.status == TaskStatus.COMPLETED
    assert manager.store.get(task_id)["executor"] != "gone-host:1"  # type: ignore[index]
    await manager.aclose()
