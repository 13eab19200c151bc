"""The task engine port declares what its users use (``kernos.tasks._engine.TaskEngine``).

Every member the scheduler, the manager, teams and the task tools reach through ``.engine`` is
declared on the base class with a default, so nothing probes an engine with ``getattr``; the
engines reach the scheduler through its public methods only (``move``, ``notify``, ``wake``...).
"""

from __future__ import annotations

import ast
from pathlib import Path

import kernos
from kernos.runtime import Runtime
from kernos.tasks import TaskManager
from kernos.tasks._dbos import DBOSEngine
from kernos.tasks._engine import LocalEngine, TaskEngine
from kernos.tasks._scheduler import TaskScheduler

TASKS = Path(kernos.__file__).parent / "tasks"
SOURCES = sorted([*TASKS.glob("*.py"), *TASKS.glob("_dbos/*.py")])


def _is_engine(node: ast.expr) -> bool:
    """``something.engine`` (the scheduler's engine, as its users reach it)."""
    return isinstance(node, ast.Attribute) and node.attr == "engine"


def _uses() -> list[tuple[str, int, str]]:
    """``(file, line, member)`` for every ``X.engine.member`` in the tasks package."""
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and _is_engine(node.value):
                found.append((path.name, node.lineno, node.attr))
    return found


def _probes() -> list[tuple[str, int]]:
    """``getattr(X.engine, ...)`` or ``getattr(X.scheduler, ...)`` calls in the tasks package."""
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and node.args
                and isinstance(node.args[0], ast.Attribute)
                and node.args[0].attr in ("engine", "scheduler")
            ):
                found.append((path.name, node.lineno))
    return found


def test_both_engines_are_task_engines() -> None:
    assert issubclass(LocalEngine, TaskEngine)
    assert issubclass(DBOSEngine, TaskEngine)
    assert TaskEngine.__abstractmethods__ == {"start", "queue_position"}


def test_every_member_used_through_engine_is_declared_on_the_port() -> None:
    uses = _uses()
    assert uses  # the scan sees the scheduler's own uses
    declared = {*dir(TaskEngine), *TaskEngine.__annotations__}
    undeclared = [use for use in uses if use[2] not in declared]
    assert undeclared == []


def test_nothing_probes_an_engine_or_its_scheduler() -> None:
    assert _probes() == []


def test_engines_call_only_public_scheduler_methods() -> None:
    private = []
    for path in [TASKS / "_engine.py", *sorted((TASKS / "_dbos").glob("*.py"))]:
        name = path.name
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "scheduler"
                and node.attr.startswith("_")
            ):
                private.append((name, node.lineno, node.attr))
    assert private == []
    for member in ("move", "notify", "wake", "mark_running", "rebuild", "run_child"):
        assert callable(getattr(TaskScheduler, member))
    for old in ("_move", "_notify", "_wake"):
        assert not hasattr(TaskScheduler, old)


async def test_the_manager_holds_its_scheduler_and_the_engine_holds_that_scheduler(
    runtime: Runtime,
) -> None:
    """The manager is not a scheduler: it holds one, which asks it what ``RunHooks`` declares,
    and the engine holds that scheduler (never the manager)."""
    assert not issubclass(TaskManager, TaskScheduler)
    manager = TaskManager(runtime)
    try:
        assert isinstance(manager.scheduler, TaskScheduler)
        assert manager.scheduler.hooks is manager
        assert manager.engine is manager.scheduler.engine
        assert manager.engine.scheduler is manager.scheduler
        assert manager.records is manager.scheduler.records
    finally:
        await manager.aclose()


def test_the_manager_calls_only_public_scheduler_methods() -> None:
    private = [
        (path.name, node.lineno, node.attr)
        for path in SOURCES
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "scheduler"
        and node.attr.startswith("_")
    ]
    assert private == []
