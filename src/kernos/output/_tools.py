"""The tools the model gets, only for the channels its agent may use:
``output_send__<name>``, ``output_send__<name>_help`` and ``output_list_channels``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from kernos.boundary import ToolContext, ToolError, ToolResult, ToolSpec
from kernos.output._channel import SEND_PREFIX, Channel, InboundMessage
from kernos.output._kernel import OutputKernel
from kernos.output._parse import OutputArgumentError, parse_output_items
from kernos.output._receipt import OutputReceipt
from kernos.output._texts import param_descriptions, text
from kernos.runtime import BaseToolset

if TYPE_CHECKING:
    from kernos.runtime import Config

LIST_TOOL = "output_list_channels"


class SendParams(BaseModel):
    """``payload``/``type``/``meta`` arrive as sent; :func:`parse_output_items` reads them, so a
    missing payload is the coded ``missing_payload`` rather than a schema error."""

    model_config = ConfigDict(extra="ignore")

    payload: Any = None
    type: Any = None
    meta: Any = None


class NoParams(BaseModel):
    model_config = ConfigDict(extra="ignore")


_STRINGS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}


def send_schema() -> dict[str, Any]:
    """String **or** array for each field; meta entries may also be JSON objects."""
    described = param_descriptions()
    return {
        "type": "object",
        "properties": {
            "payload": {
                "anyOf": [{"type": "string"}, _STRINGS],
                "description": described["payload"],
            },
            "type": {"anyOf": [{"type": "string"}, _STRINGS], "description": described["type"]},
            "meta": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "object"},
                    {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "object"}]}},
                ],
                "description": described["meta"],
            },
        },
        "required": ["payload"],
    }


def _inbound(ctx: ToolContext, default: InboundMessage | None) -> InboundMessage | None:
    found = ctx.extras.get("inbound")
    return found if isinstance(found, InboundMessage) else default


def send_tool(
    kernel: OutputKernel, channel: Channel, *, inbound: InboundMessage | None = None
) -> ToolSpec[SendParams]:
    """``output_send__<name>``: the same parse, gate, stages and receipt as every other path."""

    def validate(params: SendParams, ctx: ToolContext) -> ToolError | None:
        # the gate and the parse run in the semantic stage: nothing is sent before both pass
        try:
            target = kernel.gate(ctx.agent, channel.name)
            items = parse_output_items(
                params.payload, params.type, params.meta, max_items=kernel.max_items
            )
        except OutputArgumentError as exc:
            return ToolError(exc.code, exc.message, {"channel": channel.name})
        ctx.resolved = (target, items)
        return None

    async def execute(params: SendParams, ctx: ToolContext) -> ToolResult:
        inbound_now = _inbound(ctx, inbound)
        if ctx.resolved is None:  # called without the pipeline's semantic stage
            receipt = await kernel.send(
                channel.name,
                params.payload,
                params.type,
                params.meta,
                agent=ctx.agent,
                session_id=ctx.session_id,
                inbound=inbound_now,
            )
            return receipt.to_tool_result()
        target, items = ctx.resolved
        outcomes = await kernel.send_items(
            target, items, agent=ctx.agent, session_id=ctx.session_id, inbound=inbound_now
        )
        single = isinstance(params.payload, str)
        return OutputReceipt.of(channel.name, outcomes, single=single).to_tool_result()

    return ToolSpec(
        name=SEND_PREFIX + channel.name,
        description=f"{channel.summary()}\n{text('send_arrays.md')}",
        params=SendParams,
        execute=execute,
        validate=validate,
        json_schema=send_schema(),
    )


def help_tool(channel: Channel) -> ToolSpec[NoParams]:
    """``output_send__<name>_help``: the description, the types, the meta format, the usage."""
    body = f"{channel.summary()}\n\n{text('help.md').format(name=channel.name)}"

    async def execute(params: NoParams, ctx: ToolContext) -> str:
        return body

    return ToolSpec(
        name=f"{SEND_PREFIX}{channel.name}_help",
        description=text("help_tool.md").format(name=channel.name),
        params=NoParams,
        execute=execute,
    )


def channel_line(channel: Channel) -> str:
    first = channel.description.strip().splitlines()[0] if channel.description.strip() else ""
    kind = f" ({channel.kind})" if channel.kind else ""
    types = f" Types: {', '.join(channel.types)}." if channel.types else ""
    return f"- {channel.name}{kind}: {first}{types}".rstrip()


def list_tool(kernel: OutputKernel) -> ToolSpec[NoParams]:
    """``output_list_channels``: the channels the calling agent may use, one line each."""

    async def execute(params: NoParams, ctx: ToolContext) -> str:
        lines = [channel_line(c) for c in kernel.channels_for(ctx.agent)]
        return "\n".join(lines) if lines else "No output channels are available to you."

    return ToolSpec(
        name=LIST_TOOL, description=text("list_tool.md"), params=NoParams, execute=execute
    )


def output_tools(
    kernel: OutputKernel, agent: str = "main", *, inbound: InboundMessage | None = None
) -> list[ToolSpec[Any]]:
    """Every output tool ``agent`` gets: two per channel it may use, and the list tool.

    A channel the agent may not use has no tool at all; an agent with no channel gets no tools.
    """
    channels = kernel.channels_for(agent)
    if not channels:
        return []
    tools: list[ToolSpec[Any]] = []
    for channel in channels:
        tools.append(send_tool(kernel, channel, inbound=inbound))
        tools.append(help_tool(channel))
    tools.append(list_tool(kernel))
    return tools


class OutputToolset(BaseToolset):
    """Output channels as a toolset: ``output_send__<channel>``, ``output_help__<channel>`` and the
    list tool for the channels the session's agent may use.

    Owns its :class:`OutputKernel` (its channels and their HTTP clients): closed on exit.

    Args:
        kernel: the kernel (see :meth:`from_config`).
        inbound: the message being answered, for safe recipient backfill.
    """

    name = "output"

    def __init__(self, kernel: OutputKernel, *, inbound: InboundMessage | None = None) -> None:
        self.kernel = kernel
        self.inbound = inbound

    @classmethod
    def from_config(cls, config: Config) -> OutputToolset:
        """The toolset for ``kernos.toml``'s channels.

        Raises:
            ConfigError: a channel table is wrong.
        """
        return cls(OutputKernel.from_config(config))

    async def tools(self, session: Any) -> list[ToolSpec[Any]]:
        return output_tools(self.kernel, getattr(session, "agent", "main"), inbound=self.inbound)

    async def aclose(self) -> None:
        """Close the kernel's channels and their pooled clients."""
        await self.kernel.aclose()
