"""The DBOS API the engine calls, as it calls it: each DBOS member it reads exists, and each
call binds to the member's signature (its keywords, its number of arguments), so a DBOS upgrade
that renames or drops one fails here, by name, not deep inside a crash recovery.

The engine uses no private DBOS name at all (tests/tasks/test_dbos_public.py), so
``kernos.tasks._dbos`` holds no adapter of DBOS internals: its calls are all checked here."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any, get_type_hints

import pytest

ENGINE = Path(__file__).parents[2] / "src" / "kernos" / "tasks" / "_dbos"
#: the names the engine gives DBOS's objects: the class, a client, a queue it listed
OWNERS = {"DBOS": "DBOS", "DBOSClient": "DBOSClient", "client": "DBOSClient"}
#: typed dicts the engine fills, by the variable's annotation
TYPED = ("DBOSConfig", "StepOptions")


def _owner(name: str) -> Any:
    import dbos

    return getattr(dbos, OWNERS[name])


def _binds(target: Any, call: ast.Call, skip_self: bool) -> str | None:
    """Why ``call`` does not bind to ``target``'s signature (``None``: it does)."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin without one: only its existence is checked
        return None
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return None
    args = [None] * (len(call.args) + (1 if skip_self else 0))
    try:
        signature.bind(*args, **{k.arg: None for k in call.keywords if k.arg})
    except TypeError as exc:
        return str(exc)
    return None


def dbos_mismatches(source: str) -> list[str]:
    """Each DBOS member ``source`` uses that the installed DBOS lacks, each call that does not
    bind to its member's signature, and each key of a DBOS typed dict that DBOS does not
    declare."""
    import dbos

    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in OWNERS
            and not hasattr(_owner(node.value.id), node.attr)
        ):
            found.append(f"{node.value.id}.{node.attr}: gone")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("DBOS", "DBOSClient"):
                why = _binds(_owner(func.id), node, skip_self=False)
                if why:
                    found.append(f"{func.id}(...): {why}")
            elif (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in OWNERS
                and hasattr(_owner(func.value.id), func.attr)
            ):
                owner = _owner(func.value.id)
                member = inspect.getattr_static(owner, func.attr)
                plain = inspect.isfunction(member)  # called on an instance: self is bound
                why = _binds(
                    getattr(owner, func.attr), node, skip_self=plain and owner is not dbos.DBOS
                )
                if why:
                    found.append(f"{func.value.id}.{func.attr}(...): {why}")
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.annotation, ast.Name)
            and node.annotation.id in TYPED
            and isinstance(node.value, ast.Dict)
        ):
            declared = get_type_hints(getattr(dbos, node.annotation.id))
            for key in node.value.keys:
                if isinstance(key, ast.Constant) and key.value not in declared:
                    found.append(f"{node.annotation.id}[{key.value!r}]: not a key")
    return found


def test_every_dbos_member_the_engine_uses_is_there_as_it_is_called() -> None:
    sources = sorted(ENGINE.rglob("*.py"))
    assert len(sources) > 1  # the package, not one module
    source = "\n".join(p.read_text("utf-8") for p in sources)
    assert "DBOS.list_workflows_async(" in source  # the scan sees what it checks
    assert dbos_mismatches(source) == []


@pytest.mark.parametrize(
    ("code", "found"),
    [
        ("DBOS.recover_everything()", "DBOS.recover_everything: gone"),
        ("DBOS.list_workflows_async(no_such_filter=1)", "DBOS.list_workflows_async(...)"),
        ("DBOS.cancel_workflow_async('a', 'b', 'c')", "DBOS.cancel_workflow_async(...)"),
        ("DBOSClient(system_database=1)", "DBOSClient(...)"),
        ("client.register_queue('q', global_limit=1)", "client.register_queue(...)"),
        ("config: DBOSConfig = {'app_name': 'x'}", "DBOSConfig['app_name']"),
        ("options: StepOptions = {'retry': False}", "StepOptions['retry']"),
    ],
)
def test_the_check_finds_each_kind_of_change(code: str, found: str) -> None:
    mismatches = dbos_mismatches(code)
    assert len(mismatches) == 1 and mismatches[0].startswith(found), mismatches


def test_calls_as_the_engine_makes_them_pass_the_check() -> None:
    code = (
        "DBOS.list_workflows_async(status='PENDING', load_input=False)\n"
        "client.register_queue('q', global_concurrency=1, on_conflict='always_update')\n"
        "options: StepOptions = {'name': 'model_request', 'retries_allowed': False}\n"
    )
    assert dbos_mismatches(code) == []
