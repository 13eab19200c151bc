"""The pure rules of an MCP server's elicitation (a server asking the user something while a tool
call runs): the form's fields read from its restricted JSON schema, a typed answer checked
against a field, and the note the model reads when nobody could be asked.

The asking itself (a person on a terminal) is :mod:`kernos.tools._human`; the SDK callback that
decides between asking and answering ``cancel`` is in :mod:`kernos.tools._mcp`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from importlib import resources
from typing import Any

from kernos.errors import KernosError

#: the answers a yes/no question takes (lower case)
YES = ("y", "yes", "true", "1")
NO = ("n", "no", "false", "0")


@dataclasses.dataclass(frozen=True)
class FormField:
    """One field of an elicitation form (the spec allows flat primitives only)."""

    name: str
    kind: str  # "string", "number", "integer", "boolean", "array" (of enum strings)
    title: str | None = None
    description: str | None = None
    default: Any = None
    choices: tuple[str, ...] = ()
    required: bool = False

    def question(self) -> str:
        """The line a person reads, e.g. ``color (Favourite colour) one of red, green [green]:``."""
        label = self.title or self.name
        if self.description and self.description != label:
            label += f" ({self.description})"
        if self.choices:
            many = "any of" if self.kind == "array" else "one of"
            label += f" {many} {', '.join(self.choices)}"
        elif self.kind == "boolean":
            label += " y/n"
        if self.default is not None:
            shown = self.default
            if isinstance(shown, bool):
                shown = "y" if shown else "n"
            elif isinstance(shown, list):
                shown = ", ".join(str(v) for v in shown)
            label += f" [{shown}]"
        elif not self.required:
            label += " (optional)"
        return label + ": "


def form_fields(schema: Mapping[str, Any] | Any) -> list[FormField]:
    """The fields of an elicitation's ``requestedSchema``, in the order it lists them."""
    if not isinstance(schema, Mapping):
        schema = getattr(schema, "model_dump", lambda **_: {})(by_alias=True, exclude_none=True)
    required = set(schema.get("required") or ())
    fields = []
    for name, prop in (schema.get("properties") or {}).items():
        if not isinstance(prop, Mapping):
            continue
        kind = str(prop.get("type") or "string")
        choices: list[Any] = list(prop.get("enum") or ())
        if not choices:
            options = prop.get("oneOf") or prop.get("anyOf") or ()
            choices = [o.get("const") for o in options if isinstance(o, Mapping) and "const" in o]
        if kind == "array":
            items = prop.get("items") or {}
            choices = list(items.get("enum") or ()) or [
                o.get("const") for o in items.get("anyOf") or () if isinstance(o, Mapping)
            ]
        fields.append(
            FormField(
                name=str(name),
                kind=kind,
                title=prop.get("title"),
                description=prop.get("description"),
                default=prop.get("default"),
                choices=tuple(str(c) for c in choices if c is not None),
                required=name in required,
            )
        )
    return fields


class NoAnswer(KernosError):
    """An empty answer to a field without a default: leave it out (optional) or ask again."""


def parse_answer(field: FormField, typed: str) -> Any:
    """The value ``typed`` (one line) gives ``field``: its default when empty.

    Raises:
        NoAnswer: empty, and the field has no default.
        ValueError: not a value of the field; the message says what to type.
    """
    text = typed.strip()
    if not text:
        if field.default is not None:
            return field.default
        raise NoAnswer(field.name)
    if field.kind == "boolean":
        if text.lower() in YES:
            return True
        if text.lower() in NO:
            return False
        raise ValueError("answer y or n")
    if field.kind == "array":
        picked = [part.strip() for part in text.split(",") if part.strip()]
        wrong = [p for p in picked if field.choices and p not in field.choices]
        if wrong:
            raise ValueError(f"{', '.join(wrong)}: choose from {', '.join(field.choices)}")
        return picked
    if field.choices and text not in field.choices:
        raise ValueError(f"choose one of {', '.join(field.choices)}")
    if field.kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError("type a whole number") from None
    if field.kind == "number":
        try:
            return float(text)
        except ValueError:
            raise ValueError("type a number") from None
    return text


def nobody_asked_note(server: str, messages: list[str]) -> str:
    """What the model reads after a tool result when the server asked the user something and
    nobody could answer (``elicitation_cancelled.md``)."""
    template = resources.files("kernos.tools").joinpath("elicitation_cancelled.md")
    asked = "; ".join(f'"{m}"' for m in messages) or "(no message)"
    return template.read_text("utf-8").strip().format(server=server, asked=asked)
