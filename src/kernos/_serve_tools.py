"""The tools the MCP server adds (``compress``), and the coded answer of a tool that needs the
model when the server has none."""

from __future__ import annotations

from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kernos.boundary import (
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    non_blank_text,
)
from kernos.runtime import (
    ConfigError,
    Runtime,
    WorkspacePolicy,
    WorkspaceRefused,
)

# -- a server without a usable model ----------------------------------------------------------

#: the ``usage_calls`` session and agent of the calls the MCP host itself makes
HOST_SESSION = "mcp"
HOST_AGENT = "mcp-host"

#: the served tools that need a model, and whose model: the agent's (``None``) or ``compress``'s
MODEL_TOOLS: dict[str, str | None] = {"task": None, "task_send": None, "compress": "compress"}


def model_config_error(tool: str, error: ConfigError) -> ToolResult:
    """The coded ``config_error`` a tool that needs the model answers when there is none."""
    if error.key == "default_model":
        what = "no model is configured"
        fix = (
            'add "KERNOS_MODEL": "<provider:model>" (and the provider\'s key, e.g. '
            '"OPENAI_API_KEY") to the `env` of the kernos server in your MCP host\'s config, or '
            "set default_model in kernos.toml"
        )
    else:
        what = error.problem
        fix = f'add "{error.key}" to the `env` of the kernos server in your MCP host\'s config'
        if error.file != "(config)":
            fix += f" (or fix {error.key} in {error.file})"
    return ToolResult.from_error(
        ToolError(
            "config_error",
            f"`{tool}` needs a model and this kernos server has none it can use: {what}. To fix "
            f"it, {fix}, then restart the server. The other tools work without it.",
            {"key": error.key},
        ),
        stage="semantic",
        tool=tool,
    )


# -- compress ----------------------------------------------------------------------------------


class CompressArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    path: str
    rounds: int = Field(default=3, ge=1, le=10)


def _prepare_compress(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    path = non_blank_text(raw.get("path"))
    if path is not None:
        out["path"] = path
    rounds = raw.get("rounds")
    if isinstance(rounds, int) or non_blank_text(rounds) is not None:
        out["rounds"] = rounds
    return out


def compress_description() -> str:
    """What the host's model reads about ``compress`` (``_serve_compress.md``)."""
    return resources.files("kernos").joinpath("_serve_compress.md").read_text("utf-8").strip()


def compress_tool(runtime: Runtime) -> ToolSpec[CompressArgs]:
    """``compress(path, rounds)``: the audited protocol on one workspace file, rewritten in place
    only when a draft is approved."""

    async def run(params: CompressArgs, ctx: ToolContext) -> ToolResult:
        from kernos.compress import Status, compress_files, tool_report

        try:
            policy = WorkspacePolicy.from_config(runtime.config)
            path = policy.resolve(params.path, what="compress path")
        except WorkspaceRefused as exc:
            raise ToolError("path_refused", str(exc)) from None
        model = runtime.model(runtime.model_name("compress"))
        (report,) = await compress_files(
            [path], model=model, rounds=params.rounds, in_place=True, store=runtime.store
        )
        return ToolResult(
            tool_report(report),
            {"report": report.to_json()},
            is_error=report.status is not Status.APPROVED,
        )

    return ToolSpec(
        name="compress",
        description=compress_description(),
        params=CompressArgs,
        execute=run,
        prepare=_prepare_compress,
        max_retries=runtime.config.retries,
    )
