"""What an MCP server answers, as kernos shows it: a call's result as a bounded
:class:`~kernos.boundary.ToolResult` (:func:`_tool_result`), and an exception as one readable
line (:func:`_reason`)."""

from __future__ import annotations

import json
from typing import Any

import httpx2
from mcp import MCPError
from mcp import types as mcp_types

from kernos.boundary import ToolResult
from kernos.tools._limits import cut_text


def _tool_result(result: Any, details: dict[str, Any], limit: int) -> ToolResult:
    """The model's text for a server's result, at most ``limit`` UTF-8 bytes (plus the cut
    marker). ``structuredContent`` is kept once: as the text when there is no other, in
    ``details`` only when it says something the text does not and fits the limit."""
    out = dict(details)
    if not isinstance(result, mcp_types.CallToolResult):
        shown, dropped = cut_text(str(result), limit)
        if dropped:
            out["cut_bytes"] = dropped
        return ToolResult(text=shown, details=out)
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource):
            text = getattr(block.resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource {block.resource.uri}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link {block.uri}]")
        else:
            mime = getattr(block, "mime_type", "") or ""
            parts.append(f"[{block.type} content {mime}, not shown]".replace(" ,", ","))
    text = "\n".join(parts)
    structured = result.structured_content
    if structured is not None:
        as_json = json.dumps(structured, ensure_ascii=False, default=str)
        if not text:
            text = as_json
        elif not _same_json(text, structured):
            if len(as_json.encode("utf-8", errors="replace")) <= limit:
                out["structured"] = structured
            else:
                out["structured_omitted_bytes"] = len(as_json.encode("utf-8", errors="replace"))
    text, dropped = cut_text(text, limit)
    if dropped:
        out["cut_bytes"] = dropped
    if result.is_error:
        out.update(code="mcp_error", stage="execute")
        return ToolResult(
            text=text or "the tool reported an error and no message", details=out, is_error=True
        )
    return ToolResult(text=text, details=out)


def _same_json(text: str, value: Any) -> bool:
    """Whether ``text`` is ``value`` serialized (servers send structured content twice so)."""
    if not text.lstrip().startswith(("{", "[")):
        return False
    try:
        return bool(json.loads(text) == value)
    except (ValueError, RecursionError):
        return False


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(exc: BaseException) -> str:
    """One readable line for an exception."""
    exc = _leaf(exc)
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP {exc.response.status_code} from {exc.request.url}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
