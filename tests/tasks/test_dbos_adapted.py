"""A DBOS child on a model of another provider (pydantic-ai's ``TestModel``, asked through
:class:`kernos.runtime._models._model_adapter.PydanticModelLean`): its answers and its tool calls
are DBOS steps, as a child's on an OpenAI-compatible model are."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.models.test import TestModel
from test_dbos import use_dbos
from test_dbos_steps import counting_tool

from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager
from kernos.testing import FakeOpenAIServer


async def test_a_child_on_a_pydantic_ai_model_makes_its_answers_steps(
    project: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dbos import DBOS

    monkeypatch.delenv("KERNOS_TASK_ENGINE", raising=False)
    config = project / "kernos.toml"
    probe = (
        '[agents.probe]\nmodel = "openai-chat:probe"\ndescription = "Probe"\n'
        'instructions = "PROBE"\n\n'
    )
    config.write_text(config.read_text(encoding="utf-8").replace("[tasks]", probe + "[tasks]"))
    use_dbos(project)
    ran: list[str] = []
    runtime = Runtime(load_config(cwd=project))
    # the probe's model, as the runtime would have built it: no config names a TestModel
    runtime._models["openai-chat:probe"] = TestModel(model_name="probe")
    manager = TaskManager(runtime)
    try:
        assert manager.engine.name == "dbos"
        session = runtime.session("main", record_turns=False)
        session.add_tools([counting_tool("count", ran)])
        session.add_tools(manager.tools_for(session))
        call = {"prompt": "Survey.", "subagent_type": "probe", "tools": ["count"]}
        (record,) = manager.spawn(session, manager.resolve(call, session), background=True)
        await manager.wait([record])
        assert record.status == "completed", record.final_text
        assert ran == ["count"]  # TestModel calls every tool once, then answers
        await manager.engine._recorded([record.id])  # type: ignore[attr-defined]
        steps = sorted(
            await DBOS.list_workflow_steps_async(record.id), key=lambda s: s["function_id"]
        )
        names = [s["function_name"] for s in steps]
        assert names == ["model_request", "tool:count", "model_request"]
        assert server.requests == []  # nothing went to the OpenAI-compatible server
    finally:
        await manager.aclose(wait=True)
        runtime.close()
