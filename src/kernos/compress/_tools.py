"""The compress agent's only two tools, ``rewrite`` and ``approve``, over one protocol.

Both go through the boundary pipeline: ``prepare`` drops padded empty losses, the schema rejects
unknown top-level fields, and protocol errors come back to the model as the tool's error text.
"""

from __future__ import annotations

import contextlib
import json
from functools import cache
from importlib import resources
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from kernos.boundary import (
    NULL_WORDS,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    is_blank,
    is_padding_word,
)
from kernos.compress._protocol import CompressError, CompressProtocol
from kernos.runtime import BaseToolset

#: what a model writes into a loss it has nothing to say in
_LOSS_PADDING = NULL_WORDS | {"n/a", "na", "-", "nothing"}


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


NonBlank = Annotated[str, Field(min_length=1), AfterValidator(_not_blank)]


@cache
def read_text(name: str) -> str:
    """A model-facing text file shipped next to this module (read once per process)."""
    return resources.files("kernos.compress").joinpath(name).read_text(encoding="utf-8")


class LossArgs(BaseModel):
    """One declared loss; extra fields inside it are ignored."""

    model_config = ConfigDict(extra="ignore")

    content: NonBlank = Field(description="What was dropped, quoted or named.")
    reason: NonBlank = Field(description="Why the text is still correct without it.")


class RewriteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: NonBlank = Field(description="The complete compressed text, shipped verbatim.")
    losses: list[LossArgs] = Field(
        description="Every deliberate loss; [] only when nothing was dropped."
    )


class ApproveArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdict: NonBlank = Field(
        description="Why the newest draft is acceptable and why each declared loss is safe."
    )


def _padding(value: Any) -> bool:
    return is_blank(value) or is_padding_word(value, _LOSS_PADDING)


def _padded_loss(entry: Any) -> bool:
    if isinstance(entry, dict):
        return _padding(entry.get("content")) and _padding(entry.get("reason"))
    return _padding(entry)


def prepare_rewrite(raw: Any) -> dict[str, Any]:
    """Drop losses whose content and reason are both blank or padding words.

    A ``losses`` list sent as JSON text (some serializers do) is read as the list it encodes.
    """
    args = dict(raw) if isinstance(raw, dict) else {}
    losses = args.get("losses")
    if isinstance(losses, str) and losses.strip().startswith("["):
        with contextlib.suppress(json.JSONDecodeError):
            losses = json.loads(losses)
    if isinstance(losses, list):
        args["losses"] = [entry for entry in losses if not _padded_loss(entry)]
    return args


def rewrite_result(protocol: CompressProtocol) -> str:
    """The text ``rewrite`` answers with, for the newest draft."""
    draft = protocol.latest
    assert draft is not None
    m = protocol.metrics(draft)
    return (
        f"Draft {draft.round} recorded: {m.source_tokens} → {m.draft_tokens} tokens "
        f"({m.percent}% smaller), {len(draft.losses)} declared loss(es). A review turn follows."
    )


@cache
def _schema(params: type[BaseModel]) -> dict[str, Any]:
    # built once per process: pydantic rebuilds a JSON schema on every call, once per model turn
    return params.model_json_schema()


def compress_tools(protocol: CompressProtocol) -> list[ToolSpec[Any]]:
    """``rewrite`` and ``approve`` bound to one file's protocol."""

    async def rewrite(params: RewriteArgs, ctx: ToolContext) -> ToolResult:
        draft = protocol.submit(params.text, params.losses)
        return ToolResult(
            rewrite_result(protocol),
            details={"round": draft.round, "losses": len(draft.losses)},
        )

    async def approve(params: ApproveArgs, ctx: ToolContext) -> ToolResult:
        try:
            draft = protocol.accept(params.verdict)
        except CompressError as exc:
            code = "no_draft" if protocol.latest is None else "not_reviewed"
            raise ToolError(code, str(exc)) from None
        session = ctx.session if ctx.session is not None else ctx.extras.get("session")
        if session is not None:
            # the run ends here: no further model request is needed to hear this result
            session.request_stop()
        return ToolResult(
            f"Draft {draft.round} approved. The run ends here.", details={"round": draft.round}
        )

    return [
        ToolSpec(
            name="rewrite",
            description=read_text("rewrite.md").strip(),
            params=RewriteArgs,
            execute=rewrite,
            prepare=prepare_rewrite,
            json_schema=_schema(RewriteArgs),
        ),
        ToolSpec(
            name="approve",
            description=read_text("approve.md").strip(),
            params=ApproveArgs,
            execute=approve,
            json_schema=_schema(ApproveArgs),
        ),
    ]


class CompressToolset(BaseToolset):
    """One file's compress protocol as a toolset: ``rewrite`` and ``approve``."""

    name = "compress"

    def __init__(self, protocol: CompressProtocol) -> None:
        self.protocol = protocol

    async def tools(self, session: Any) -> list[ToolSpec[Any]]:
        return compress_tools(self.protocol)
