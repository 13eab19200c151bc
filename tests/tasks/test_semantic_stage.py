"""The ``task`` tool resolves and checks its spawn rules in the boundary's semantic stage: a call
that cannot spawn is a ``semantic`` result and nothing starts (docs/architecture.md, "The tool-call
pipeline")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from kernos.boundary import ToolContext, call_tool
from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager


async def _echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("done")])


@pytest.fixture
def rt(project: Path, monkeypatch: pytest.MonkeyPatch) -> Runtime:
    runtime = Runtime(load_config(cwd=project))
    model = FunctionModel(_echo)
    monkeypatch.setattr(runtime, "model", lambda name: model)
    return runtime


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"prompt": "x"}, None),  # neither a category nor an agent: a resolution error
        ({"prompt": "x", "category": "no-such-category"}, None),
        (
            {
                "category": "quick",
                "tasks": [{"prompt": "a", "name": "n"}, {"prompt": "b", "name": "n"}],
            },
            "name_taken",
        ),
    ],
)
async def test_a_task_call_that_cannot_spawn_is_semantic_and_starts_nothing(
    rt: Runtime, args: dict[str, object], code: str | None
) -> None:
    manager = TaskManager(rt)
    session = rt.session("main", record_turns=False)
    session.add_tools(manager.tools_for(session))
    executed: list[object] = []
    spec = session.tools["task"]

    async def spy(params: object, ctx: ToolContext) -> object:
        executed.append(params)
        return await spec.execute(params, ctx)  # type: ignore[arg-type]

    watched = dataclasses.replace(spec, execute=spy)
    result = await call_tool(watched, args, ToolContext(session=session))
    assert result.is_error and result.stage == "semantic", result
    if code is not None:
        assert result.code == code
    assert executed == [] and manager.records == {}
    await manager.aclose()


async def test_a_valid_task_call_spawns_once_with_the_resolution_of_the_semantic_stage(
    rt: Runtime,
) -> None:
    manager = TaskManager(rt)
    session = rt.session("main", record_turns=False)
    session.add_tools(manager.tools_for(session))
    resolved: list[object] = []
    original = manager.resolve
    manager.resolve = lambda *a: resolved.append(a) or original(*a)  # type: ignore[method-assign]
    result = await call_tool(
        session.tools["task"], {"prompt": "x", "category": "quick"}, ToolContext(session=session)
    )
    assert not result.is_error, result.text
    assert len(resolved) == 1 and len(manager.records) == 1
    await manager.aclose()
