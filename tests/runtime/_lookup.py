"""The ``lookup`` tool the session-loop tests script a model against: it answers ``value of
<key>`` and refuses the key ``no`` (``forbidden_key``); two schema errors are retried."""

from __future__ import annotations

from pydantic import BaseModel

from kernos.boundary import ToolContext, ToolError, ToolSpec


class KeyParams(BaseModel):
    key: str


async def _lookup(params: KeyParams, ctx: ToolContext) -> str:
    return f"value of {params.key}"


def _validate(params: KeyParams) -> ToolError | None:
    return ToolError("forbidden_key", "That key is off limits.") if params.key == "no" else None


LOOKUP = ToolSpec(
    name="lookup",
    description="Look a key up.",
    params=KeyParams,
    execute=_lookup,
    validate=_validate,
    max_retries=2,
)
