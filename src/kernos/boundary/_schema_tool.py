"""The schema stage of a tool that only has a JSON schema (MCP tools and the like):
:func:`schema_tool` builds a :class:`~kernos.boundary.ToolSpec` that validates with
``jsonschema`` on kernos's side, so a bad call gets the coded ``invalid_arguments`` text naming
each field before anything reaches the tool's owner; its ``prepare`` is
:func:`kernos.boundary._schema.schema_prepare`'s, and a schema pattern is matched bounded
(:data:`kernos.boundary._schema.PATTERN_SECONDS`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict, ValidationError, create_model, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from kernos.boundary._schema import PATTERN_SECONDS, _deadline, _search, schema_prepare
from kernos.boundary._tool import ToolContext, ToolResult, ToolSpec

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError as JsonSchemaError

log = logging.getLogger("kernos.boundary")


_TOO_SLOW = (
    "matching {what} against the pattern {pattern!r} took too long (over {seconds:g} s); send a "
    "shorter or simpler value"
)


def _too_slow(what: str, pattern: Any) -> str:
    return _TOO_SLOW.format(what=what, pattern=pattern, seconds=PATTERN_SECONDS)


def _bounded_pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``pattern`` keyword, run bounded (its own uses ``re``, which cannot stop)."""
    from jsonschema.exceptions import ValidationError as SchemaError

    if not validator.is_type(instance, "string"):
        return
    found = _search(pattern, instance)
    if found is None:
        yield SchemaError(_too_slow("the value", pattern))
    elif not found:
        yield SchemaError(f"{instance!r} does not match {pattern!r}")


def _bounded_pattern_properties(
    validator: Any, pattern_properties: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError as SchemaError

    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for key, value in instance.items():
            found = _search(pattern, key)
            if found is None:
                shown = key if len(key) <= 40 else key[:39] + "…"
                yield SchemaError(_too_slow(f"the property name {shown!r}", pattern))
            elif found:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _bounded_additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    """jsonschema's ``additionalProperties``, whose test against ``patternProperties`` is run
    bounded; a name whose match runs out of time counts as additional."""
    from jsonschema.exceptions import ValidationError as SchemaError

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [
        key
        for key in instance
        if key not in properties and not any(_search(p, key) for p in patterns)
    ]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            listed = ", ".join(repr(each) for each in sorted(patterns))
            yield SchemaError(f"{joined} {verb} not match any of the regexes: {listed}")
        else:
            names = ", ".join(repr(each) for each in sorted(extras, key=str))
            verb = "was" if len(extras) == 1 else "were"
            yield SchemaError(f"Additional properties are not allowed ({names} {verb} unexpected)")


def _validator_for(json_schema: dict[str, Any]) -> Any | None:
    import jsonschema  # ~60 ms; only schema-only tools need it, so light commands skip it

    try:
        cls = jsonschema.validators.validator_for(
            json_schema, default=jsonschema.Draft202012Validator
        )
        cls.check_schema(json_schema)
        extend: Any = jsonschema.validators.extend  # untyped in types-jsonschema
        bounded = extend(
            cls,
            {
                "pattern": _bounded_pattern,
                "patternProperties": _bounded_pattern_properties,
                "additionalProperties": _bounded_additional_properties,
            },
        )
        return bounded(json_schema)
    except Exception:
        log.warning("a tool schema is not valid JSON Schema; arguments are not checked against it")
        return None


def _line_errors(errors: list[JsonSchemaError]) -> list[InitErrorDetails]:
    lines: list[InitErrorDetails] = []
    for error in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        path = tuple(p if isinstance(p, int | str) else str(p) for p in error.absolute_path)
        instance = error.instance
        if error.validator == "required" and isinstance(instance, dict):
            wanted = error.validator_value if isinstance(error.validator_value, list) else []
            for name in wanted:
                if isinstance(name, str) and name not in instance:
                    lines.append({"type": "missing", "loc": (*path, name), "input": instance})
            continue
        if error.validator == "additionalProperties" and isinstance(instance, dict):
            known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
            extras = [k for k in instance if k not in known]
            if extras:
                for name in extras:
                    lines.append(
                        {"type": "extra_forbidden", "loc": (*path, name), "input": instance[name]}
                    )
                continue
        message = error.message
        if len(message) > 200:
            message = message[:197] + "..."
        lines.append(
            {
                "type": PydanticCustomError("json_schema", "{message}", {"message": message}),
                "loc": path,
                "input": instance,
            }
        )
    return lines


def _args_model(name: str, json_schema: dict[str, Any]) -> type[BaseModel]:
    validator = _validator_for(json_schema)
    title = f"{name}_arguments"

    def check(data: Any) -> Any:
        if validator is None:
            return data
        token = _deadline.set(time.monotonic() + PATTERN_SECONDS)
        try:
            errors = list(validator.iter_errors(data))
        except Exception:  # an unresolvable $ref, a regex Python cannot read: let the tool judge
            log.warning("validating arguments of %s failed; sent unchecked", name, exc_info=True)
            return data
        finally:
            _deadline.reset(token)
        if errors:
            raise ValidationError.from_exception_data(title, _line_errors(errors))
        return data

    return create_model(
        title,
        __config__=ConfigDict(extra="allow"),
        __validators__={"_json_schema": cast(Any, model_validator(mode="before")(check))},
    )


SchemaExecute = Callable[[dict[str, Any], ToolContext], Awaitable["ToolResult | str"]]


def schema_tool(
    name: str,
    description: str,
    json_schema: Mapping[str, Any],
    execute: SchemaExecute,
    *,
    max_retries: int = 3,
) -> ToolSpec[Any]:
    """A :class:`ToolSpec` for a tool that has only a JSON schema.

    ``prepare`` is :func:`schema_prepare` of the schema, the schema stage validates with
    ``jsonschema`` (one ``invalid_arguments`` line per bad field), and ``execute`` receives the
    prepared, validated arguments as a plain dict. The model is shown ``json_schema`` unchanged.

    Args:
        name: the tool name the model calls (``^[A-Za-z0-9_-]{1,64}$``).
        description: what the model reads about the tool.
        json_schema: the tool's input schema (an object schema).
        execute: ``async (args, ctx) -> ToolResult | str``.
        max_retries: how many schema failures the model may make on this tool in a row.
    """
    schema = dict(json_schema)
    model = _args_model(name, schema)

    async def run(params: BaseModel, ctx: ToolContext) -> ToolResult | str:
        return await execute(dict(params.model_extra or {}), ctx)

    return ToolSpec(
        name=name,
        description=description,
        params=model,
        execute=run,
        prepare=schema_prepare(schema),
        json_schema=schema,
        max_retries=max_retries,
    )
