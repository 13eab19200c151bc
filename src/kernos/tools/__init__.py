"""Tools for agents: the built-in workspace tools, Python functions, and each agent's selection.

Built-ins (``read_file``, ``list_files``, ``search_files``, and the write tools ``write_file``
and ``edit_file``, asked about by default) are confined by the workspace policy; they are
registered through the ``kernos.tools`` entry-point group like any plugin.
``[tools.NAME] function = "module:attr"`` turns a Python function into a tool; its signature
and docstring are the schema and description. An agent's ``tools`` selects by name or glob; no
key means the built-ins, ``[]`` none. ``[mcp.NAME]`` servers offer ``NAME__<tool>``.
"""

import typing

from kernos import _lazy

if typing.TYPE_CHECKING:
    from kernos.tools._builtin import (
        BUILTIN_NAMES,
        BUILTIN_PREPARE,
    )
    from kernos.tools._builtin_specs import builtin_tools
    from kernos.tools._catalog import (
        TOOLS_GROUP,
        CatalogToolset,
        ToolPluginContext,
        agent_tools,
        check_catalog,
        load_catalog,
        workspace_tools,
    )
    from kernos.tools._functions import doc_descriptions, function_tool
    from kernos.tools._human import human_answers, on_a_terminal
    from kernos.tools._mcp import (
        McpAgentToolset,
        McpServerError,
        McpServers,
        McpToolset,
        mcp_tool_name,
    )
    from kernos.tools._mcp_login import McpServerStatus, mcp_login, mcp_logout, mcp_status
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
    from kernos.tools._write import (
        WRITE_NAMES,
        edited,
        write_tools,
    )

__all__ = [
    "BUILTIN_NAMES",
    "BUILTIN_PREPARE",
    "CLAUDE_CODE_TOOLS",
    "MAX_FILE_BYTES",
    "TOOLS_GROUP",
    "WRITE_NAMES",
    "CatalogToolset",
    "LocalWorkspace",
    "McpAgentToolset",
    "McpServerError",
    "McpServerStatus",
    "McpServers",
    "McpToolset",
    "PathRefused",
    "ToolPluginContext",
    "WorkspacePaths",
    "agent_tools",
    "builtin_tools",
    "check_catalog",
    "claude_code_hint",
    "doc_descriptions",
    "edited",
    "function_tool",
    "human_answers",
    "is_glob",
    "load_catalog",
    "matches",
    "mcp_later",
    "mcp_login",
    "mcp_logout",
    "mcp_status",
    "mcp_tool_name",
    "on_a_terminal",
    "select_mcp_tools",
    "select_tools",
    "unmatched",
    "workspace_tools",
    "write_tools",
]


if not typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy.exports(__name__)
