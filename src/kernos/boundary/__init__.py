"""The tool-call boundary: one pipeline for every tool, the padding rules it shares, and the
cleaning every text from a model gets once where it enters kernos.

``prepare → schema → semantic → execute``; see :func:`call_tool`.
"""

import importlib
import typing

if typing.TYPE_CHECKING:
    from kernos.boundary._padding import (
        NULL_WORDS,
        boolean_flag,
        identifier,
        is_blank,
        is_padding_word,
        non_blank_text,
        string_list,
        strip_padding,
    )
    from kernos.boundary._regex import PatternTooComplex, compile_pattern
    from kernos.boundary._repairs import (
        ABSENT,
        Repair,
        describe_repairs,
        find_repairs,
        repairs_data,
        repairs_from_data,
    )
    from kernos.boundary._schema import schema_prepare
    from kernos.boundary._schema_tool import SchemaExecute, schema_tool
    from kernos.boundary._text import (
        REPLACEMENT,
        clean_json_text,
        clean_text,
        clean_value,
        nesting_depth,
    )
    from kernos.boundary._tool import (
        MAX_ARGUMENT_DEPTH,
        ToolContext,
        ToolError,
        ToolResult,
        ToolSpec,
        call_tool,
        decode_arguments,
        schema_error_text,
    )

__all__ = [
    "ABSENT",
    "MAX_ARGUMENT_DEPTH",
    "NULL_WORDS",
    "REPLACEMENT",
    "PatternTooComplex",
    "Repair",
    "SchemaExecute",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolSpec",
    "boolean_flag",
    "call_tool",
    "clean_json_text",
    "clean_text",
    "clean_value",
    "compile_pattern",
    "decode_arguments",
    "describe_repairs",
    "find_repairs",
    "identifier",
    "is_blank",
    "is_padding_word",
    "nesting_depth",
    "non_blank_text",
    "repairs_data",
    "repairs_from_data",
    "schema_error_text",
    "schema_prepare",
    "schema_tool",
    "string_list",
    "strip_padding",
]

#: name -> private module, imported on first use: the text and padding helpers load neither
#: pydantic nor asyncio (``kernos channels`` needs only those)
_EXPORTS = {
    "ABSENT": "_repairs",
    "MAX_ARGUMENT_DEPTH": "_tool",
    "NULL_WORDS": "_padding",
    "PatternTooComplex": "_regex",
    "REPLACEMENT": "_text",
    "Repair": "_repairs",
    "SchemaExecute": "_schema_tool",
    "ToolContext": "_tool",
    "ToolError": "_tool",
    "ToolResult": "_tool",
    "ToolSpec": "_tool",
    "boolean_flag": "_padding",
    "call_tool": "_tool",
    "clean_json_text": "_text",
    "clean_text": "_text",
    "clean_value": "_text",
    "compile_pattern": "_regex",
    "decode_arguments": "_tool",
    "describe_repairs": "_repairs",
    "find_repairs": "_repairs",
    "identifier": "_padding",
    "is_blank": "_padding",
    "is_padding_word": "_padding",
    "nesting_depth": "_text",
    "non_blank_text": "_padding",
    "repairs_data": "_repairs",
    "repairs_from_data": "_repairs",
    "schema_error_text": "_tool",
    "schema_prepare": "_schema",
    "schema_tool": "_schema_tool",
    "string_list": "_padding",
    "strip_padding": "_padding",
}


# what kernos._lazy.exports builds for the other packages, written out: the boundary imports
# nothing of kernos (the import contract in pyproject.toml). Hidden from type checkers, which
# read the names above, so a misspelt import is still an error.
if not typing.TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_EXPORTS})
