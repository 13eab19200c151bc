"""Sources of tools kernos did not write: MCP servers (issue 9 §2)."""

from kernos.tools._mcp import McpServerError, McpServers, McpToolset, mcp_tool_name

__all__ = [
    "McpServerError",
    "McpServers",
    "McpToolset",
    "mcp_tool_name",
]
