"""The boundary for tools that only have a JSON schema: MCP tools and the like.

A consumed tool brings no pydantic model and no ``prepare`` of its own, so both are derived from
its JSON schema:

* :func:`schema_prepare` compiles the schema once into a plan and returns a pure
  ``prepare(raw) -> dict`` that turns text a provider sent for a non-text property into the value
  it spells (every property, required or optional), and provider padding into absence (*optional
  properties only*):

  ===========================================================  ===============================
  value sent, any property whose schema takes no string        becomes
  ===========================================================  ===============================
  ``"true"`` / ``"false"`` (any case), boolean property         the boolean
  a numeric string, integer / number property                   the number (``"4.0"`` → ``4``)
  JSON text of an array / object, array / object property       the decoded value, cleaned by
                                                                its own schema (at most
                                                                :data:`MAX_JSON_TEXT` characters,
                                                                nesting within
                                                                ``MAX_ARGUMENT_DEPTH``)
  ===========================================================  ===============================

  A property whose schema takes a string (``type`` lists, ``anyOf`` branches, no ``type`` at all)
  keeps its text as sent, even when it looks like a number or JSON; a value the schema already
  accepts is never changed.

  ==========================================================  ====================
  optional property, value sent                               becomes
  ==========================================================  ====================
  ``null``, the property's schema does not allow null         absent
  ``""``, a property with a declared type                     absent
  ``[]`` / ``{}``, array / object property                    absent
  ``"null"``/``"none"``/``"undefined"``, property that takes
  no string, or whose ``enum`` or ``pattern`` rejects it      absent
  a key ``additionalProperties: false`` forbids               dropped
  an undeclared key whose value is ``""`` / empty / ``null``  dropped
  ==========================================================  ====================

  Only ``""`` is padding: whitespace-only text is a value (a separator, an indent). Required
  properties are never stripped; nested objects and arrays recurse with their own ``required``
  (array entries are never dropped, only coerced and cleaned inside). ``anyOf``/``oneOf`` with a
  ``null`` branch, ``type`` lists, ``allOf`` and local ``$ref``/``$defs`` are followed; a shape
  the plan does not understand is left as it is.
* :func:`kernos.boundary._schema_tool.schema_tool` builds a :class:`~kernos.boundary.ToolSpec`
  whose schema stage validates with ``jsonschema`` on kernos's side, so a bad call gets the coded
  ``invalid_arguments`` text naming each field before anything reaches the tool's owner.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from kernos.boundary._padding import NULL_WORDS
from kernos.boundary._regex import PatternTooComplex, compile_pattern
from kernos.boundary._text import clean_value, nesting_depth
from kernos.boundary._tool import MAX_ARGUMENT_DEPTH

if TYPE_CHECKING:
    pass

log = logging.getLogger("kernos.boundary")

_NUMERIC = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
_INTEGER = re.compile(r"^[+-]?\d+$")
#: the longest string that is decoded as JSON text for an array or object property
MAX_JSON_TEXT = 1 << 20
_MAX_BRANCHES = 64  # anyOf/oneOf alternatives one property may offer; more reads as "anything"
_MAX_BRANCH_NESTING = 4  # anyOf inside anyOf, flattened this deep; deeper reads as "anything"
_MAX_DEPTH = 64  # schemas nest this deep at most in the plan; deeper reads as "anything"
_JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})
_ABSENT: Any = object()  # a sentinel: "drop this key" (None is a value)
#: the matching time one call's schema patterns get in all (prepare and validation each); a
#: pattern still running then is stopped (``regex``'s ``timeout``), never left to hang the loop
PATTERN_SECONDS = 1.0
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "kernos_schema_pattern_deadline", default=None
)


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    """A schema's pattern compiled for a bounded run; ``None`` when it cannot be run at all."""
    try:
        return compile_pattern(pattern)
    except (PatternTooComplex, ValueError, TypeError, OverflowError, MemoryError):
        return None  # regex.error is a ValueError


def _search(pattern: Any, text: str) -> bool | None:
    """Whether ``pattern`` matches somewhere in ``text``, within what is left of the call's
    :data:`PATTERN_SECONDS`; ``None``: it ran out of time. A pattern that cannot be run (too
    large, not a regex) matches: the tool's owner judges what it cannot."""
    compiled = _compiled(pattern) if isinstance(pattern, str) else pattern
    if compiled is None:
        return True
    deadline = _deadline.get()
    left = PATTERN_SECONDS if deadline is None else deadline - time.monotonic()
    if left <= 0:
        return None
    try:
        return compiled.search(text, timeout=left, concurrent=True) is not None
    except TimeoutError:
        return None


# -- the compiled plan ---------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Prop:
    """What prepare needs to know about one property's schema."""

    types: frozenset[str] = frozenset()  # empty: the schema says nothing about the type
    nullable: bool = True
    enum: tuple[Any, ...] | None = None
    pattern: Any = None  # a compiled regex.Pattern (see _compiled)
    obj: _Obj | None = None  # the object's own plan, when the value may be an object
    items: _Prop | None = None  # the element plan, when the value may be an array


@dataclass(eq=False, slots=True)
class _Obj:
    properties: dict[str, _Prop] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    closed: bool = False  # additionalProperties: false
    patterns: tuple[Any, ...] = ()  # compiled regex.Patterns of patternProperties


class _Compiler:
    """Turns a JSON schema into :class:`_Prop` / :class:`_Obj` plans; never raises."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.refs: dict[str, _Prop] = {}
        self.depth = 0

    def resolve(self, schema: Any, seen: frozenset[str] = frozenset()) -> Mapping[str, Any]:
        """Follow a local ``$ref`` chain; an unknown or remote ref reads as ``{}``."""
        while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str):
            ref = schema["$ref"]
            if ref in seen or not ref.startswith("#"):
                return {}
            seen = seen | {ref}
            target: Any = self.root
            for raw_part in ref[1:].split("/")[1:]:
                part = raw_part.replace("~1", "/").replace("~0", "~")
                if isinstance(target, Mapping) and part in target:
                    target = target[part]
                else:
                    return {}
            if len(schema) > 1:  # sibling keywords next to $ref (2019-09+): both apply
                merged = dict(target) if isinstance(target, Mapping) else {}
                merged.update({k: v for k, v in schema.items() if k != "$ref"})
                schema = merged
            else:
                schema = target
        return schema if isinstance(schema, Mapping) else {}

    def prop(self, schema: Any) -> _Prop:
        if self.depth > _MAX_DEPTH:
            return _Prop()
        self.depth += 1
        try:
            return self._prop(schema)
        finally:
            self.depth -= 1

    def _prop(self, schema: Any) -> _Prop:
        ref = schema.get("$ref") if isinstance(schema, Mapping) else None
        if isinstance(ref, str) and len(schema) == 1:
            if ref in self.refs:  # recursive schemas link back to the plan being built
                return self.refs[ref]
            plan = _Prop()
            self.refs[ref] = plan
            self._fill(plan, self.resolve(schema))
            return plan
        plan = _Prop()
        self._fill(plan, self.resolve(schema))
        return plan

    def _fill(self, plan: _Prop, schema: Mapping[str, Any]) -> None:
        branches = self._branches(schema, _MAX_BRANCH_NESTING)
        types: set[str] = set()
        untyped = False
        nullable = False
        enums: list[Any] | None = []
        patterns: list[str] = []
        objects: list[Mapping[str, Any]] = []
        arrays: list[Any] = []
        for branch in branches:
            branch = self._merge_all_of(branch)
            branch_types = self._types(branch)
            if not branch_types:
                untyped = True
            types |= branch_types
            if "null" in branch_types or branch.get("nullable") is True:
                nullable = True
            if isinstance(branch.get("enum"), list) and enums is not None:
                enums.extend(branch["enum"])
            elif "const" in branch and enums is not None:
                enums.append(branch["const"])
            else:
                enums = None
            if isinstance(branch.get("pattern"), str):
                patterns.append(branch["pattern"])
            if "object" in branch_types or (not branch_types and "properties" in branch):
                objects.append(branch)
            if "array" in branch_types or (not branch_types and "items" in branch):
                arrays.append(branch.get("items", {}))
        if enums is not None and None in enums:
            nullable = True
        plan.types = frozenset() if untyped else frozenset(types)
        plan.nullable = nullable or untyped
        plan.enum = tuple(enums) if enums else None
        if len(patterns) == 1 and len(branches) == 1:
            plan.pattern = _compiled(patterns[0])
        if len(objects) == 1:
            plan.obj = self.obj(objects[0])
        if len(arrays) == 1 and isinstance(arrays[0], Mapping):
            plan.items = self.prop(arrays[0])

    def _branches(self, schema: Mapping[str, Any], nesting: int) -> list[Mapping[str, Any]]:
        """The alternatives ``anyOf``/``oneOf`` offer, nested ones flattened (``anyOf`` of an
        ``anyOf`` with ``null``: what an optional union often becomes); a schema nested deeper
        than ``nesting`` or spreading past :data:`_MAX_BRANCHES` stays one untyped branch."""
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                if nesting <= 0:
                    return [{}]
                branches: list[Mapping[str, Any]] = []
                for option in options:
                    branch = self.resolve({**schema, key: None, **self._as_dict(option)})
                    branches.extend(self._branches(branch, nesting - 1))
                    if len(branches) > _MAX_BRANCHES:
                        return [{}]
                return branches
        return [schema]

    def obj(self, schema: Mapping[str, Any]) -> _Obj:
        schema = self._merge_all_of(self.resolve(schema))
        plan = _Obj()
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            plan.properties = {str(k): self.prop(v) for k, v in properties.items()}
        required = schema.get("required")
        if isinstance(required, list):
            plan.required = frozenset(r for r in required if isinstance(r, str))
        plan.closed = schema.get("additionalProperties") is False
        pattern_props = schema.get("patternProperties")
        if isinstance(pattern_props, Mapping):
            compiled = []
            for pattern in pattern_props:
                runnable = _compiled(str(pattern))
                if runnable is None:
                    plan.closed = False  # a pattern we cannot run: never drop keys it may allow
                else:
                    compiled.append(runnable)
            plan.patterns = tuple(compiled)
        return plan

    def _merge_all_of(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        parts = schema.get("allOf")
        if not isinstance(parts, list) or not parts:
            return schema
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        properties: dict[str, Any] = dict(merged.get("properties") or {})
        required: list[Any] = list(merged.get("required") or [])
        for part in parts:
            resolved = self._merge_all_of(self.resolve(part))
            for key, value in resolved.items():
                if key == "properties" and isinstance(value, Mapping):
                    properties.update(value)
                elif key == "required" and isinstance(value, list):
                    required.extend(value)
                else:
                    merged.setdefault(key, value)
        if properties:
            merged["properties"] = properties
        if required:
            merged["required"] = required
        return merged

    @staticmethod
    def _as_dict(value: Any) -> dict[str, Any]:
        return dict(value) if isinstance(value, Mapping) else {}

    @staticmethod
    def _types(schema: Mapping[str, Any]) -> set[str]:
        declared = schema.get("type")
        if isinstance(declared, str):
            return {declared} & _JSON_TYPES
        if isinstance(declared, list):
            return {t for t in declared if isinstance(t, str)} & _JSON_TYPES
        if "enum" in schema and isinstance(schema["enum"], list):
            return {_json_type(v) for v in schema["enum"]}
        if "const" in schema:
            return {_json_type(schema["const"])}
        return set()


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# -- applying the plan -----------------------------------------------------------------------------
#
# ``level`` is how many lists and objects enclose the value being cleaned (the arguments dict is
# at 0): JSON text decoded at ``level`` may nest at most MAX_ARGUMENT_DEPTH - level deep, so
# decoding never makes the arguments nest deeper than call_tool lets a provider send them
# (boundary/_tool.py).


def _clean_object(value: dict[str, Any], plan: _Obj, level: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    properties = plan.properties
    required = plan.required
    for key, item in value.items():
        prop = properties.get(key)
        if prop is None:
            if key not in required and (
                _is_padding(item) or (plan.closed and not _pattern_allows(plan, key))
            ):
                continue  # an undeclared key: padding, or one the schema forbids
            out[key] = item
        elif key in required:
            out[key] = _clean_required(item, prop, level + 1)
        else:
            cleaned = _clean_optional(item, prop, level + 1)
            if cleaned is not _ABSENT:
                out[key] = cleaned
    return out


def _is_padding(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value  # whitespace is text: a separator, an indent
    return isinstance(value, list | dict) and not value


def _pattern_allows(plan: _Obj, key: str) -> bool:
    # out of time counts as allowed: the key is kept, and validation judges it
    return any(_search(pattern, key) is not False for pattern in plan.patterns)


def _clean_required(value: Any, prop: _Prop, level: int) -> Any:
    """A required value is never dropped: only coerced when lossless, and cleaned inside."""
    if isinstance(value, str):
        types = prop.types
        if not types or "string" in types:
            return value  # the text is a legitimate value
        value = _coerce(value, types, level)
    if isinstance(value, dict) and prop.obj is not None:
        return _clean_object(value, prop.obj, level)
    if isinstance(value, list) and prop.items is not None:
        return _clean_items(value, prop.items, level)
    return value


def _clean_items(value: list[Any], items: _Prop, level: int) -> list[Any]:
    """An array's entries: each is cleaned like a required value (an entry is never dropped)."""
    types = items.types
    if items.obj is None and items.items is None and (not types or "string" in types):
        return value  # nothing an entry could need: no walk
    return [_clean_required(entry, items, level + 1) for entry in value]


def _clean_optional(value: Any, prop: _Prop, level: int) -> Any:
    types = prop.types
    if value is None:
        return value if prop.nullable else _ABSENT
    if isinstance(value, str):
        return _clean_string(value, prop, level)
    if isinstance(value, list):
        if not value:
            return _ABSENT if types else value
        if prop.items is not None:
            return _clean_items(value, prop.items, level)
        return value
    if isinstance(value, dict):
        if not value:
            return _ABSENT if types else value
        if prop.obj is not None:
            cleaned = _clean_object(value, prop.obj, level)
            return cleaned if cleaned else _ABSENT
        return value
    return value


def _clean_string(value: str, prop: _Prop, level: int) -> Any:
    types = prop.types
    if not types:  # nothing declared: no way to tell padding from a value
        return value
    enum = prop.enum
    if enum is not None and value in enum:
        return value
    if not value:
        return _ABSENT  # only "" is padding: whitespace-only text is a value
    if "string" not in types:
        coerced = _coerce(value, types, level)
        if coerced is not value:
            return (
                _clean_optional(coerced, prop, level)
                if isinstance(coerced, list | dict)
                else coerced
            )
        if value.strip().casefold() in NULL_WORDS:
            return _ABSENT  # "null" for a number, a boolean, an object: padding, never a value
        return value
    if value.strip().casefold() in NULL_WORDS:
        if enum is not None:
            return _ABSENT  # the enum does not hold it (checked above)
        if prop.pattern is not None and _search(prop.pattern, value) is False:
            return _ABSENT
    return value


def _coerce(text: str, types: frozenset[str], level: int) -> Any:
    """``text`` as the value it spells, for a schema whose ``types`` exclude strings.

    JSON text becomes the array or object it encodes (when the schema takes that type and the
    text is bounded), ``"true"``/``"false"`` a boolean, a numeric string a number the schema
    takes. Anything else is returned as the same object, for the validator to judge.
    """
    word = text.strip()
    if not word:
        return text
    first = word[0]
    if first == "[" or first == "{":
        kind = "array" if first == "[" else "object"
        if kind in types and len(word) <= MAX_JSON_TEXT:
            decoded = _decode(word, MAX_ARGUMENT_DEPTH - level)  # "[" opens an array only
            if decoded is not None:
                return decoded
        return text
    if "boolean" in types:
        folded = word.casefold()
        if folded == "true":
            return True
        if folded == "false":
            return False
    if ("integer" in types or "number" in types) and len(word) < 300 and _NUMERIC.match(word):
        number = _number(word, integer_only="number" not in types)
        if number is not None:
            return number
    return text


def _decode(text: str, room: int) -> list[Any] | dict[str, Any] | None:
    """The list or dict ``text`` encodes when it nests at most ``room`` deep; else ``None``."""
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(decoded, list | dict) or nesting_depth(decoded, room) > room:
        return None
    return cast("list[Any] | dict[str, Any]", clean_value(decoded))


def _number(word: str, *, integer_only: bool) -> int | float | None:
    """A numeric string as a JSON number; ``None`` when it is not one the schema accepts."""
    if _INTEGER.match(word):
        return int(word)
    number = float(word)
    if not math.isfinite(number):
        return None
    if number.is_integer() and integer_only:
        return int(number)
    return None if integer_only else number


def schema_prepare(json_schema: Mapping[str, Any]) -> Callable[[Any], dict[str, Any]]:
    """A ``prepare`` derived from ``json_schema`` (an object schema): pure and never raising.

    The schema is read once, here; the function returned does no schema work per call.
    """
    try:
        compiler = _Compiler(json_schema)
        plan = compiler.obj(json_schema)
    except Exception:  # a schema shape no rule foresaw: do no harm, pass arguments through
        log.warning("could not read a tool schema; its padding is not normalized", exc_info=True)
        plan = _Obj()

    def prepare(raw: Any) -> dict[str, Any]:
        if not isinstance(raw, dict):
            return {}
        token = _deadline.set(time.monotonic() + PATTERN_SECONDS)
        try:
            return _clean_object(raw, plan, 0)
        except Exception:  # never raise: hand the arguments on for the validator to judge
            log.warning("padding normalization failed; arguments kept as sent", exc_info=True)
            return dict(raw)
        finally:
            _deadline.reset(token)

    return prepare
