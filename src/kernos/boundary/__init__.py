"""The tool-call boundary: one pipeline for every tool, the padding rules it shares, and the
cleaning every text from a model gets once where it enters kernos.

``prepare → schema → semantic → execute``; see :func:`call_tool`.
"""

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
from kernos.boundary._schema import SchemaExecute, schema_prepare, schema_tool
from kernos.boundary._text import REPLACEMENT, clean_text, clean_value, nesting_depth
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
    "MAX_ARGUMENT_DEPTH",
    "NULL_WORDS",
    "REPLACEMENT",
    "SchemaExecute",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolSpec",
    "boolean_flag",
    "call_tool",
    "clean_text",
    "clean_value",
    "decode_arguments",
    "identifier",
    "is_blank",
    "is_padding_word",
    "nesting_depth",
    "non_blank_text",
    "schema_error_text",
    "schema_prepare",
    "schema_tool",
    "string_list",
    "strip_padding",
]
