"""The ``kernos.toml`` key reference (``docs/config.md``), made from the config model itself.

Every table is a pydantic model of ``_config.py`` or ``_config_tables.py``; a key's text is the
``#:`` comment above its field there (Sphinx's convention), its default the field's.
``kernos config reference`` prints it; ``tests/runtime/test_config_reference.py`` regenerates it
and compares it with the committed file, so a key added to the model without a comment, or
without a new ``docs/config.md``, fails.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
import typing
from dataclasses import asdict, dataclass, field
from functools import cache
from types import NoneType, UnionType
from typing import Any, Literal

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from kernos.errors import KernosError
from kernos.runtime._config._config import Config
from kernos.runtime._config._config_tables import AgentConfig, TasksConfig, _Budgeted
from kernos.runtime._rules._budget import CHILD_DEFAULTS, MAIN_DEFAULTS

#: which commands read each top-level key or table (``kernos config check`` reads them all);
#: a new ``Config`` field needs its line here (the reference refuses to build without it)
READ_BY: dict[str, str] = {
    "default_model": "run, compress, mcp, worker",
    "retries": "run, mcp, worker",
    "models": "run, compress, mcp, worker",
    "agents": "run, tools, mcp, worker",
    "categories": "run, mcp, worker",
    "channels": "run, send, channels, mcp, worker",
    "tools": "run, tools, mcp, worker",
    "tasks": "run, mcp, worker, tasks",
    "store": "every command that opens the store: run, mcp, worker, tasks, sessions, usage",
    "output": "run, send, mcp, worker",
    "workspace": "run, send, tools, mcp, worker",
    "mcp": "run, tools, mcp, worker",
    "permissions": "run, chat, tools, mcp, worker",
}


@dataclass
class Key:
    """One key of a table: its name, type, default (as written in TOML) and meaning."""

    name: str
    type: str
    default: str
    text: str


@dataclass
class Table:
    """``[name]`` (``name`` empty: the top level), what reads it, what it is, and its keys."""

    name: str
    read_by: str
    text: str
    keys: list[Key] = field(default_factory=list)


class MissingText(KernosError, ValueError):
    """A config field has no ``#:`` comment (or a table no docstring) to describe it: a mistake
    in kernos itself, found by its tests."""


@cache
def _comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment above each annotated field of ``cls``'s own body."""
    lines, _ = inspect.getsourcelines(cls)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    found: dict[str, str] = {}
    for node in body.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above: list[str] = []
            index = node.lineno - 2
            while index >= 0 and lines[index].strip().startswith("#:"):
                above.insert(0, lines[index].strip()[2:].strip())
                index -= 1
            if above:
                found[node.target.id] = " ".join(above)
    return found


def _field_text(model: type[BaseModel], name: str) -> str:
    for cls in model.__mro__:
        if name in inspect.get_annotations(cls):
            text = _comments(cls).get(name)
            if text:
                return text
            break
    raise MissingText(f"{model.__name__}.{name} has no #: comment in runtime/_config*.py")


def _type(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, UnionType):
        return " or ".join(_type(a) for a in args if a is not NoneType)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return f"table of {_type(args[1])}"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if annotation in names:
        return names[annotation]
    return "table" if annotation is Any else getattr(annotation, "__name__", str(annotation))


def _toml(value: Any) -> str:
    if value is None:
        return "unset"
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _budget_default(model: type[BaseModel], name: str) -> str:
    """What an unset budget key means: kernos's own limit (``_budget.MAIN_DEFAULTS`` for a
    top-level session, ``CHILD_DEFAULTS`` for a child), else ``[tasks]``'s for a child."""

    def shown(budget: Any) -> str:
        value = getattr(budget, name)
        if value is None:
            return "no limit"
        return f"{value:g}s" if name == "timeout" else str(value)

    child = shown(CHILD_DEFAULTS)
    if model is TasksConfig:
        return f"unset: {child}"
    if model is AgentConfig:
        return (
            f"unset: {shown(MAIN_DEFAULTS)} as a main session; as a child `[tasks]`'s, else {child}"
        )
    return f"unset: `[tasks]`'s, else {child}"


def _keys(model: type[BaseModel]) -> list[Key]:
    keys = []
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        if info.is_required():
            default = "required"
        elif issubclass(model, _Budgeted) and name in _Budgeted.model_fields:
            default = _budget_default(model, name)
        elif info.default_factory is not None:
            default = _toml(info.default_factory())  # type: ignore[call-arg]
        else:
            default = _toml(None if info.default is PydanticUndefined else info.default)
        keys.append(Key(name, _type(info.annotation), default, _field_text(model, name)))
    return keys


def _table_text(model: type[BaseModel]) -> str:
    doc = inspect.getdoc(model)
    if not doc:
        raise MissingText(f"{model.__name__} has no docstring in runtime/_config*.py")
    return " ".join(doc.split())


def config_reference() -> list[Table]:
    """Every table of ``kernos.toml`` and its keys, from :class:`Config`.

    Raises:
        MissingText: a field has no ``#:`` comment, a table no docstring, or a top-level key
            no :data:`READ_BY` line.
    """
    top = Table("", "", "Keys outside any table, at the top of the file.")
    tables = [top]
    for name, info in Config.model_fields.items():
        if info.exclude:
            continue
        if name not in READ_BY:
            raise MissingText(f"Config.{name} has no READ_BY line in runtime/_config/_reference.py")
        annotation = info.annotation
        value = typing.get_args(annotation)[1] if typing.get_origin(annotation) is dict else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            tables.append(Table(name, READ_BY[name], _table_text(annotation), _keys(annotation)))
        elif isinstance(value, type) and issubclass(value, BaseModel):
            tables.append(Table(f"{name}.NAME", READ_BY[name], _table_text(value), _keys(value)))
        elif typing.get_origin(value) is dict:  # [channels.NAME]: each kind takes its own keys
            kind = Key("kind", "string", "required", _field_text(Config, name))
            text = "One table per channel; the keys besides `kind` are the kind's own."
            tables.append(Table(f"{name}.NAME", READ_BY[name], text, [kind]))
        else:
            default = _toml(None if info.default is PydanticUndefined else info.default)
            top.keys.append(Key(name, _type(annotation), default, _field_text(Config, name)))
    readers = (each for key in top.keys for each in READ_BY[key.name].split(", "))
    top.read_by = ", ".join(dict.fromkeys(readers))
    return tables


def _cell(text: str) -> str:
    text = re.sub(r":(?:class|func|data):`([^`]+)`", r"`\1`", text)
    return text.replace("|", "\\|").replace("``", "`")


def render_reference(tables: list[Table]) -> str:
    """``docs/config.md``'s text. Pure."""
    out = [
        "# `kernos.toml` reference",
        "",
        "<!-- generated by `kernos config reference > docs/config.md` from src/kernos/runtime/"
        "_config/_config.py; tests/runtime/test_config_reference.py fails when they differ -->",
        "",
        "Every table and key kernos reads, its default and which commands read it;",
        "`kernos config check` reads them all. `${NAME}` in a value is the environment variable.",
    ]
    for table in tables:
        out += ["", f"## `[{table.name}]`" if table.name else "## Top level", ""]
        out += [_cell(table.text), "", f"Read by: {table.read_by}.", ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        out += [
            f"| `{k.name}` | {_cell(k.type)} | {_cell(k.default)} | {_cell(k.text)} |"
            for k in table.keys
        ]
    return "\n".join(out) + "\n"


def reference_record(tables: list[Table]) -> dict[str, Any]:
    """``kernos config reference --json``'s document."""
    return {"tables": [asdict(t) for t in tables]}
