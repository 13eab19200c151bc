"""The tool-call boundary: one pipeline for every tool, and the padding rules it shares.

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
from kernos.boundary._tool import (
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    call_tool,
    schema_error_text,
)

__all__ = [
    "NULL_WORDS",
    "SchemaExecute",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolSpec",
    "boolean_flag",
    "call_tool",
    "identifier",
    "is_blank",
    "is_padding_word",
    "non_blank_text",
    "schema_error_text",
    "schema_prepare",
    "schema_tool",
    "string_list",
    "strip_padding",
]
