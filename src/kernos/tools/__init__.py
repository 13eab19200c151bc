"""Tools for agents: the built-in workspace tools, Python functions, and each agent's selection.

Built-ins (``read_file``, ``list_files``, ``search_files``) are read-only and confined by the
workspace policy; they are registered through the ``kernos.tools`` entry-point group like any
plugin. ``[tools.NAME] function = "module:attr"`` turns a Python function into a tool; its
signature and docstring are the schema and description. An agent's ``tools`` selects by name or
glob; no key means the built-ins, ``[]`` none. ``[mcp.NAME]`` servers offer ``NAME__<tool>``.
"""

import typing

from kernos import _lazy

if typing.TYPE_CHECKING:
    from kernos.tools._builtin import (
        BUILTIN_NAMES,
        BUILTIN_PREPARE,
        ListFilesArgs,
        ReadFileArgs,
        SearchFilesArgs,
        builtin_tools,
    )
    from kernos.tools._catalog import (
        TOOLS_GROUP,
        CatalogToolset,
        ToolCatalog,
        ToolEntry,
        ToolPluginContext,
        agent_tools,
        check_catalog,
        default_workspace,
        load_catalog,
        load_function,
        workspace_tools,
    )
    from kernos.tools._functions import doc_descriptions, function_tool
    from kernos.tools._mcp import (
        McpAgentToolset,
        McpServerError,
        McpServers,
        McpToolset,
        mcp_tool_name,
    )
    from kernos.tools._paths import MAX_FILE_BYTES, LocalWorkspace, PathRefused, WorkspacePaths
    from kernos.tools._select import (
        CLAUDE_CODE_TOOLS,
        claude_code_hint,
        is_glob,
        matches,
        mcp_later,
        select_mcp_tools,
        select_tools,
        unmatched,
    )

__all__ = [
    "BUILTIN_NAMES",
    "BUILTIN_PREPARE",
    "CLAUDE_CODE_TOOLS",
    "MAX_FILE_BYTES",
    "TOOLS_GROUP",
    "CatalogToolset",
    "ListFilesArgs",
    "LocalWorkspace",
    "McpAgentToolset",
    "McpServerError",
    "McpServers",
    "McpToolset",
    "PathRefused",
    "ReadFileArgs",
    "SearchFilesArgs",
    "ToolCatalog",
    "ToolEntry",
    "ToolPluginContext",
    "WorkspacePaths",
    "agent_tools",
    "builtin_tools",
    "check_catalog",
    "claude_code_hint",
    "default_workspace",
    "doc_descriptions",
    "function_tool",
    "is_glob",
    "load_catalog",
    "load_function",
    "matches",
    "mcp_later",
    "mcp_tool_name",
    "select_mcp_tools",
    "select_tools",
    "unmatched",
    "workspace_tools",
]

#: name -> private module, imported on first use: a run without ``[mcp]`` servers never loads the
#: MCP SDK (about 0.9 s of CPU at every ``kernos run`` and ``kernos worker`` start)
_EXPORTS = {
    "BUILTIN_NAMES": "_builtin",
    "BUILTIN_PREPARE": "_builtin",
    "CLAUDE_CODE_TOOLS": "_select",
    "CatalogToolset": "_catalog",
    "ListFilesArgs": "_builtin",
    "LocalWorkspace": "_paths",
    "MAX_FILE_BYTES": "_paths",
    "McpAgentToolset": "_mcp",
    "McpServerError": "_mcp",
    "McpServers": "_mcp",
    "McpToolset": "_mcp",
    "PathRefused": "_paths",
    "ReadFileArgs": "_builtin",
    "SearchFilesArgs": "_builtin",
    "TOOLS_GROUP": "_catalog",
    "ToolCatalog": "_catalog",
    "ToolEntry": "_catalog",
    "ToolPluginContext": "_catalog",
    "WorkspacePaths": "_paths",
    "agent_tools": "_catalog",
    "builtin_tools": "_builtin",
    "check_catalog": "_catalog",
    "claude_code_hint": "_select",
    "default_workspace": "_catalog",
    "doc_descriptions": "_functions",
    "function_tool": "_functions",
    "is_glob": "_select",
    "load_catalog": "_catalog",
    "load_function": "_catalog",
    "matches": "_select",
    "mcp_later": "_select",
    "mcp_tool_name": "_mcp",
    "select_mcp_tools": "_select",
    "select_tools": "_select",
    "unmatched": "_select",
    "workspace_tools": "_catalog",
}

if not typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy.exports(__name__, _EXPORTS)
