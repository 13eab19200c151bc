"""Permission rules: whether a tool call runs, is asked about first, or is refused. Pure.

``[permissions]`` and ``[agents.NAME.permissions]`` list tool-name globs under ``allow``,
``ask`` and ``deny``; an entry may add a path glob for tools that take a ``path``
(``"write_file(docs/**)"``).
A call's rule (:func:`decide`): the first table, most specific first, with an entry that matches
(within a table ``deny`` beats ``ask`` beats ``allow``) → the tool's own default
(``ToolSpec.permission``: the write tools say ``ask``) → the first table's ``default`` → ``allow``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from wcmatch import fnmatch as wcfnmatch
from wcmatch import glob as wcglob

Rule = Literal["allow", "ask", "deny"]
#: the lists of a table, strongest first
RULES: tuple[Rule, ...] = ("deny", "ask", "allow")

_ENTRY = re.compile(r"^\s*([^()\s]+)\s*(?:\(\s*([^()]*?)\s*\))?\s*$")


@dataclass(frozen=True)
class PermissionEntry:
    """One entry of a list: a tool-name glob and, optionally, a path glob."""

    tool: str
    path: str | None = None

    def __str__(self) -> str:
        return self.tool if self.path is None else f"{self.tool}({self.path})"


def parse_entry(text: str) -> PermissionEntry:
    """``"write_file"`` or ``"write_file(docs/**)"`` as an entry.

    Raises:
        ValueError: not a tool-name glob with an optional ``(path glob)``; the message says so.
    """
    found = _ENTRY.match(text)
    if found is None or (found.group(2) is not None and not found.group(2)):
        raise ValueError(
            f"{text!r} is not a permission rule: write a tool name or glob, optionally with a "
            'path glob in parentheses, e.g. "write_file" or "write_file(docs/**)"'
        )
    return PermissionEntry(found.group(1), found.group(2))


def _name_matches(pattern: str, name: str) -> bool:
    return bool(wcfnmatch.fnmatch(name, pattern, flags=wcfnmatch.BRACE))


def normal_path(path: str) -> str:
    """A model-supplied workspace path as rules see it: relative, ``/``-separated, normalized."""
    text = posixpath.normpath(path.replace("\\", "/"))
    return "" if text == "." else text


def entry_matches(entry: PermissionEntry, tool: str, path: str | None) -> bool:
    """Whether ``entry`` covers a call of ``tool`` (on ``path``, for a workspace tool). An entry
    with a path glob covers only calls that name a path it matches."""
    if not _name_matches(entry.tool, tool):
        return False
    if entry.path is None:
        return True
    if path is None:
        return False
    flags = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB
    return bool(wcglob.globmatch(normal_path(path), entry.path, flags=flags))


@dataclass(frozen=True)
class PermissionTable:
    """One table's lists, parsed: where it is (``permissions``, ``agents.NAME.permissions``),
    its entries by rule, and its ``default`` (``None``: not set)."""

    where: str
    allow: tuple[PermissionEntry, ...] = ()
    ask: tuple[PermissionEntry, ...] = ()
    deny: tuple[PermissionEntry, ...] = ()
    default: Rule | None = None

    def entries(self, rule: Rule) -> tuple[PermissionEntry, ...]:
        return {"allow": self.allow, "ask": self.ask, "deny": self.deny}[rule]


@dataclass(frozen=True)
class Decision:
    """A call's rule and why: the entry and table that chose it, the tool's own default, or
    a table's ``default``."""

    rule: Rule
    why: str


def decide(
    tables: Sequence[PermissionTable], tool: str, path: str | None = None, own: Rule | None = None
) -> Decision:
    """The rule for a call of ``tool`` (on ``path``) under ``tables`` (most specific first), for
    a tool whose own default is ``own``."""
    for table in tables:
        for rule in RULES:
            for entry in table.entries(rule):
                if entry_matches(entry, tool, path):
                    return Decision(rule, f"{table.where}.{rule} {str(entry)!r}")
    if own is not None:
        return Decision(own, "the tool's own default")
    for table in tables:
        if table.default is not None:
            return Decision(table.default, f"{table.where}.default")
    return Decision("allow", "kernos's default")


def offered(tables: Sequence[PermissionTable], tool: str, own: Rule | None = None) -> bool:
    """Whether ``tool`` is offered to the model at all: not when its rule, for any path, is
    ``deny`` (an entry with a path glob denies only some calls, so the tool stays)."""
    return decide(tables, tool, None, own).rule != "deny"


def unmatched_entries(
    tables: Sequence[PermissionTable], names: Sequence[str]
) -> list[tuple[str, str]]:
    """``(where, entry)`` for each entry whose tool-name glob matches none of ``names``."""
    return [
        (f"{table.where}.{rule}", str(entry))
        for table in tables
        for rule in RULES
        for entry in table.entries(rule)
        if not any(_name_matches(entry.tool, name) for name in names)
    ]
