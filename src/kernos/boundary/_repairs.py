"""Repair receipts: what a tool's ``prepare`` changed in a call, as data.

:func:`find_repairs` compares the arguments a provider sent (decoded) with what ``prepare`` gave
back and names each change: a field dropped as padding, a value coerced or decoded from JSON
text, a batch item discarded, a text trimmed or clamped. It is pure and never raises, and it
works for every ``prepare`` (schema-derived or a tool's own) because it reads only the two
values. The model's result is never changed by it: a receipt is for people (``kernos -v run``,
the task transcript, the ``kernos.tool_call`` span, ``kernos usage``), so no model learns to pad.

======================  =========================================================================
rule                    the change
======================  =========================================================================
``padding``             a field whose value was blank (``""``, ``[]``, ``{}``, ``null``, blank
                        entries) or a null/padding word (``"null"``, ``"unused"``) was dropped
``dropped``             a field with any other value was dropped (a key the tool does not know)
``item_dropped``        an entry of a list was discarded (a padding batch item, a non-object)
``coerced``             text became the number or boolean it spells
``decoded``             text became the array or object its JSON encodes
``wrapped``             a single value became a one-entry list
``trimmed``             text lost surrounding whitespace
``clamped``             text was cut to a limit (ends with ``...``)
``collapsed``           whitespace runs inside text became single spaces
``rewritten``           any other change of a value (``added``: a field ``prepare`` supplied)
======================  =========================================================================
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from kernos.boundary._padding import NULL_WORDS, is_blank

#: words that read as "nothing" in any field (the null words and the padding words of
#: :mod:`kernos.tasks._normalize`), for naming a dropped field's rule
_EMPTY_WORDS = NULL_WORDS | {"unused", "placeholder", "not used", "n/a"}


class _Absent:
    """The side of a repair that has no value: a field that was dropped, or added."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __reduce__(self) -> str:
        return "ABSENT"


#: ``Repair.became`` of a dropped field, ``Repair.sent`` of an added one
ABSENT: Any = _Absent()


class Repair(NamedTuple):
    """One change the boundary made to a call (a named tuple: made on every repaired call,
    where a frozen dataclass costs three times as much to build).

    Args:
        field: where, as a path into the arguments sent (``tasks[1].prompt``; ``""``: the whole).
        sent: the value the provider sent there (:data:`ABSENT` when ``prepare`` added it).
        became: what it became (:data:`ABSENT` when it was dropped).
        rule: which rule changed it (the table in :mod:`kernos.boundary._repairs`).
    """

    field: str
    sent: Any
    became: Any
    rule: str

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data: ``field``, ``rule``, and ``sent`` / ``became`` unless absent."""
        out: dict[str, Any] = {"field": self.field}
        if self.sent is not ABSENT:
            out["sent"] = self.sent
        if self.became is not ABSENT:
            out["became"] = self.became
        out["rule"] = self.rule
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Repair | None:
        """The repair :meth:`as_dict` wrote; ``None`` for anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("field"), str):
            return None
        rule = data.get("rule")
        return cls(
            data["field"],
            data.get("sent", ABSENT),
            data.get("became", ABSENT),
            rule if isinstance(rule, str) else "rewritten",
        )


def find_repairs(sent: Any, became: Any) -> tuple[Repair, ...]:
    """Every change between ``sent`` (the decoded arguments) and ``became`` (``prepare``'s
    output), in the order of the fields sent. Empty when ``prepare`` changed nothing."""
    if type(sent) is type(became) and sent == became:
        return ()
    out: list[Repair] = []
    try:
        _walk("", sent, became, out)
    except (
        RecursionError
    ):  # the arguments' depth is bounded before prepare; never raise all the same
        return (Repair("", sent, became, "rewritten"),)
    return tuple(out)


def repairs_data(repairs: Iterable[Repair]) -> list[dict[str, Any]]:
    """A receipt as plain JSON data (:meth:`Repair.as_dict` each): what the store, a durable
    step's record and the secret scrubber keep."""
    return [r.as_dict() for r in repairs]


def repairs_from_data(listed: Any) -> tuple[Repair, ...]:
    """The receipt :func:`repairs_data` wrote; an entry that is not a repair is left out."""
    if not isinstance(listed, list):
        return ()
    found = (Repair.from_dict(r) for r in listed)
    return tuple(r for r in found if r is not None)


def describe_repairs(name: str, repairs: tuple[Repair, ...] | list[Repair]) -> str:
    """One line for people:
    ``read_file repaired: limit "5" → 5 (coerced); x "" → absent (padding)``."""
    parts = [
        f"{r.field or '(arguments)'} {_shown(r.sent)} → {_shown(r.became)} ({r.rule})"
        for r in repairs
    ]
    return f"{name} repaired: " + "; ".join(parts)


def _shown(value: Any, limit: int = 60) -> str:
    if value is ABSENT:
        return "absent"
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, TypeError, RecursionError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _walk(path: str, sent: Any, became: Any, out: list[Repair]) -> None:
    if type(sent) is type(became) and sent == became:
        return
    if isinstance(sent, dict) and isinstance(became, dict):
        for key, value in sent.items():
            where = _key(path, key)
            if key in became:
                _walk(where, value, became[key], out)
            else:
                out.append(Repair(where, value, ABSENT, _dropped_rule(value)))
        for key, value in became.items():
            if key not in sent:
                out.append(Repair(_key(path, key), ABSENT, value, "added"))
        return
    if isinstance(sent, list) and isinstance(became, list):
        _walk_list(path, sent, became, out)
        return
    out.append(Repair(path, sent, became, _changed_rule(sent, became)))


def _walk_list(path: str, sent: list[Any], became: list[Any], out: list[Repair]) -> None:
    if len(sent) == len(became):
        for index, (a, b) in enumerate(zip(sent, became, strict=True)):
            _walk(f"{path}[{index}]", a, b, out)
        return
    # entries were discarded (or added): each entry kept is matched with the sent entry, from
    # where the last match left off, that it resembles most; the ones passed over were dropped
    start = 0
    for order, kept in enumerate(became):
        best, best_score = -1, -1
        # later entries must stay for the kept entries still to match
        last = max(start, len(sent) - (len(became) - order))
        for index in range(start, min(last + 1, len(sent))):
            score = _resemblance(sent[index], kept)
            if score > best_score:
                best, best_score = index, score
        if best < 0 or best_score == 0:
            out.append(Repair(f"{path}[{start}]", ABSENT, kept, "added"))
            continue
        for index in range(start, best):
            out.append(Repair(f"{path}[{index}]", sent[index], ABSENT, "item_dropped"))
        _walk(f"{path}[{best}]", sent[best], kept, out)
        start = best + 1
    for index in range(start, len(sent)):
        out.append(Repair(f"{path}[{index}]", sent[index], ABSENT, "item_dropped"))


def _resemblance(sent: Any, kept: Any) -> int:
    """How alike a sent entry and a kept one are: 0 not at all; more when more fields agree."""
    if type(sent) is type(kept) and sent == kept:
        return 1 << 20
    if isinstance(sent, dict) and isinstance(kept, dict):
        return 1 + sum(1 for k, v in kept.items() if k in sent and sent[k] == v)
    if isinstance(sent, str) and isinstance(kept, str):
        return 2 if sent.strip() == kept.strip() else 1
    return 1 if type(sent) is type(kept) else 0


def _dropped_rule(value: Any) -> str:
    if is_blank(value):
        return "padding"
    if isinstance(value, str) and value.strip().casefold() in _EMPTY_WORDS:
        return "padding"
    return "dropped"


def _changed_rule(sent: Any, became: Any) -> str:
    if isinstance(sent, str):
        if isinstance(became, bool | int | float):
            return "coerced"
        if isinstance(became, list) and became in ([sent.strip()], [sent]):
            return "wrapped"
        if isinstance(became, list | dict) and sent.lstrip()[:1] in ("[", "{"):
            return "decoded"
        if isinstance(became, str):
            if became == sent.strip():
                return "trimmed"
            if became.endswith("...") and len(became) < len(sent.strip()):
                return "clamped"
            if became == " ".join(sent.split()):
                return "collapsed"
    elif isinstance(became, list) and became == [sent]:
        return "wrapped"
    return "rewritten"
