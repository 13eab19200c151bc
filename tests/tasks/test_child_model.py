"""A child's model comes from configuration, not from the model: the ``task`` tool's ``model``
names a configured alias or the caller's own model string, never a file (``replay:``) or a
provider of the model's choosing; a refusal is ``model_not_allowed`` in the semantic stage, before
anything is built, opened or spawned (docs/architecture.md: what a model chooses is bounded or
checked against configuration)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernos.boundary import ToolContext, ToolResult, call_tool
from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager
from kernos.tasks._resolve import allowed_models
from kernos.testing import FakeOpenAIServer, text

#: paths no test here may see opened (the audit hook refuses them, so a broken rule fails the
#: test instead of reading /dev/zero until memory runs out)
_FORBIDDEN: set[str] = set()
_OPENED: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _FORBIDDEN and isinstance(args[0], str | bytes | os.PathLike):
        path = os.fsdecode(args[0])
        if path in _FORBIDDEN:
            _OPENED.append(path)
            raise PermissionError(f"test: {path} must not be opened")


sys.addaudithook(_audit)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[set[str]]:
    """The set of paths that must not be opened; what was tried is in ``_OPENED``."""
    _OPENED.clear()
    yield _FORBIDDEN
    _FORBIDDEN.clear()
    _OPENED.clear()


ALIASES = """
[models.fast]
model = "openai-chat:fast"
"""


@pytest.fixture
def rt(project: Path, server: FakeOpenAIServer) -> Iterator[Runtime]:
    with (project / "kernos.toml").open("a", encoding="utf-8") as file:
        file.write(ALIASES)
    runtime = Runtime(load_config(cwd=project))
    yield runtime
    runtime.close()


async def _task(rt: Runtime, args: dict[str, Any]) -> tuple[ToolResult, TaskManager]:
    manager = TaskManager(rt)
    session = rt.session("main", record_turns=False)
    session.add_tools(manager.tools_for(session))
    result = await call_tool(session.tools["task"], args, ToolContext(session=session))
    return result, manager


ALLOWED = (
    "Allowed models: fast, openai-chat:test. Or leave model out: the child then runs on its "
    "agent's configured model."
)


@pytest.mark.parametrize(
    "model", ["replay:/etc/passwd", "replay:/dev/zero", "openai:gpt-4o-mini", "replay:FIFO"]
)
async def test_a_model_the_configuration_does_not_name_is_refused_before_anything_opens(
    rt: Runtime, server: FakeOpenAIServer, watched: set[str], tmp_path: Path, model: str
) -> None:
    if model == "replay:FIFO":  # opening it for reading would block the loop
        fifo = tmp_path / "cassette.fifo"
        os.mkfifo(fifo)
        model = f"replay:{fifo}"
    watched.update({"/etc/passwd", "/dev/zero", str(tmp_path / "cassette.fifo")})
    result, manager = await _task(rt, {"prompt": "x", "subagent_type": "explore", "model": model})
    assert result.is_error and result.stage == "semantic"
    assert result.code == "model_not_allowed"
    assert result.text.endswith("nothing was spawned. " + ALLOWED)
    assert result.details["allowed"] == ["fast", "openai-chat:test"]
    assert _OPENED == [] and manager.records == {} and server.requests == []
    await manager.aclose()


async def test_an_existing_and_a_missing_file_get_the_same_refusal(
    rt: Runtime, watched: set[str]
) -> None:
    watched.update({"/etc/passwd", "/etc/passwx"})
    texts = []
    for path in ("/etc/passwd", "/etc/passwx"):
        result, manager = await _task(
            rt, {"prompt": "x", "subagent_type": "explore", "model": f"replay:{path}"}
        )
        texts.append(result.text.replace(path, "PATH"))
        await manager.aclose()
    assert texts[0] == texts[1]
    assert texts[0] == (
        'The model "replay:PATH" cannot be chosen for a child task; nothing was spawned. ' + ALLOWED
    )
    assert _OPENED == []


async def test_a_rejected_batch_spawns_nothing(rt: Runtime, server: FakeOpenAIServer) -> None:
    result, manager = await _task(
        rt,
        {
            "subagent_type": "explore",
            "tasks": [{"prompt": "a", "model": "fast"}, {"prompt": "b", "model": "replay:/x"}],
        },
    )
    assert result.code == "invalid_items" and result.stage == "semantic"
    assert result.details["items"] == [{"item": 2, "codes": ["model_not_allowed"]}]
    assert 'item 2 (model: "replay:/x" is not an allowed model)' in result.text
    assert result.text.endswith(ALLOWED)
    assert manager.records == {} and server.requests == []
    await manager.aclose()


@pytest.mark.parametrize("model", ["fast", "openai-chat:test"])
async def test_an_alias_or_the_callers_own_model_is_accepted(
    rt: Runtime, server: FakeOpenAIServer, model: str
) -> None:
    server.script(text("child done"))
    result, manager = await _task(rt, {"prompt": "x", "subagent_type": "explore", "model": model})
    assert not result.is_error, result.text
    (record,) = manager.records.values()
    assert record.model_name == model
    await manager.aclose(wait=True)


def test_the_allowed_models_are_the_aliases_and_the_callers_own_model_never_a_file() -> None:
    assert allowed_models(["fast", "big"], "openai-chat:t") == ("big", "fast", "openai-chat:t")
    assert allowed_models(["fast"], "replay:/tmp/c.json") == ("fast",)  # its own, but a file
    assert allowed_models([], None) == ()


# -- names and descriptions are bounded before anything is stored or echoed ---------------------

HUGE = "n" * 10_000_000


@pytest.mark.parametrize(
    ("field", "code"), [("name", "name_too_long"), ("description", "description_too_long")]
)
async def test_an_over_long_name_or_description_is_refused_without_echoing_it(
    rt: Runtime, server: FakeOpenAIServer, field: str, code: str
) -> None:
    result, manager = await _task(rt, {"prompt": "x", "subagent_type": "explore", field: HUGE})
    assert (result.code, result.stage) == (code, "semantic")
    assert len(result.text) < 300 and "nnnnnnnnnn" not in result.text
    assert manager.records == {} and manager.store.children(manager_parent(manager)) == []
    await manager.aclose()


def manager_parent(manager: TaskManager) -> str:
    (sid,) = manager._depth
    return sid


async def test_the_bounds_are_80_and_200_characters_and_hold_per_batch_item(
    rt: Runtime, server: FakeOpenAIServer
) -> None:
    server.script(text("done"))
    result, manager = await _task(
        rt,
        {"prompt": "x", "subagent_type": "explore", "name": "n" * 80, "description": "d" * 200},
    )
    assert not result.is_error, result.text
    await manager.aclose(wait=True)
    result, manager = await _task(
        rt,
        {
            "subagent_type": "explore",
            "tasks": [{"prompt": "a"}, {"prompt": "b", "name": "n" * 81}],
        },
    )
    assert result.code == "invalid_items"
    assert result.details["items"] == [{"item": 2, "codes": ["name_too_long"]}]
    assert "item 2 (name: is over 80 characters)" in result.text
    assert manager.records == {}
    await manager.aclose()


async def test_a_task_id_or_name_a_companion_cannot_find_is_not_echoed_whole(
    rt: Runtime,
) -> None:
    manager = TaskManager(rt)
    session = rt.session("main", record_turns=False)
    session.add_tools(manager.tools_for(session))
    for tool, args in (
        ("task_send", {"to": HUGE, "message": "hi"}),
        ("task_output", {"name": HUGE}),
        ("task_cancel", {"task_id": HUGE}),
    ):
        result = await call_tool(session.tools[tool], args, ToolContext(session=session))
        assert result.code == "unknown_task" and len(result.text) < 300, (tool, result.text[:300])
    await manager.aclose()
