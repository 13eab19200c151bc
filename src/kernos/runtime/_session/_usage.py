"""Token usage: what one model response reported, sums by model / agent / task, the price. Pure
apart from :func:`price`, which reads genai-prices' bundled data (no network).

A usage row is ``{"session_id", "task_id", "agent", "model", "provider", "input_tokens",
"output_tokens", "cached_tokens", "created_at"}``; ``task_id`` is ``None`` for a main session.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernos.runtime._config._config_tables import ModelPrice

GROUPS = ("model", "agent", "task")

_SPAN = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str) -> float:
    """``30m``, ``12h``, ``1d``, ``2w`` as seconds.

    Raises:
        ValueError: anything else, with the accepted forms in the message.
    """
    match = _SPAN.match(text)
    if not match:
        raise ValueError(
            f"--since {text!r} is not a span; write a number and a unit: 30m, 12h, 1d or 2w"
        )
    return int(match[1]) * _SECONDS[match[2]]


def response_usage(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """One entry per model response in ``messages`` (pydantic-ai ``ModelResponse`` objects):
    model, provider and the token counts it reported."""
    found = []
    for message in messages:
        usage = getattr(message, "usage", None)
        if getattr(message, "kind", None) != "response" or usage is None:
            continue
        found.append(
            {
                "model": getattr(message, "model_name", None),
                "provider": getattr(message, "provider_name", None),
                "input_tokens": int(usage.input_tokens or 0),
                "output_tokens": int(usage.output_tokens or 0),
                "cached_tokens": int(getattr(usage, "cache_read_tokens", 0) or 0),
            }
        )
    return found


def price(model: str | None, provider: str | None, inp: int, out: int, cached: int) -> float | None:
    """The price in USD from genai-prices' data, or None when the model is not known there."""
    if not model:
        return None
    from genai_prices import Usage, calc_price

    try:
        done = calc_price(
            Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cached),
            model_ref=model,
            provider_id=provider,
        )
    except (LookupError, ValueError):
        return None
    return float(done.total_price)


#: the stages whose coded error rejects a call's arguments (``execute``: the tool itself failed)
REJECTING_STAGES = frozenset({"json", "schema", "semantic"})


def call_outcome(result: Any) -> tuple[bool, bool]:
    """Whether a tool call's :class:`~kernos.boundary.ToolResult` was repaired by the boundary
    (it carries repairs) and whether it was rejected with a coded error (arguments, not the tool
    failing): what ``kernos usage`` counts per model."""
    repaired = bool(result.repairs)
    rejected = bool(result.is_error and result.code and result.stage in REJECTING_STAGES)
    return repaired, rejected


def add_call_counts(
    groups: list[dict[str, Any]], summed: dict[str, Any], calls: Iterable[dict[str, Any]], by: str
) -> None:
    """Add ``repaired_calls`` and ``rejected_calls`` to each group and to the total, from tool
    call rows (``{"model", "agent", "task_id", "repaired", "rejected"}``); a group with calls
    but no model response of its own is added with zero requests."""
    found = {g[by]: g for g in groups}
    for each in (*groups, summed):
        each.setdefault("repaired_calls", 0)
        each.setdefault("rejected_calls", 0)
    for call in calls:
        key = group_key(call, by)
        group = found.get(key)
        if group is None:
            group = {by: key, "requests": 0, "input_tokens": 0, "output_tokens": 0,
                    "cached_tokens": 0, "cost": 0.0, "repaired_calls": 0,
                    "rejected_calls": 0}  # fmt: skip
            found[key] = group
            groups.append(group)
        for into in (group, summed):
            into["repaired_calls"] += int(bool(call["repaired"]))
            into["rejected_calls"] += int(bool(call["rejected"]))


def configured_cost(price: ModelPrice, inp: int, out: int, cached: int) -> float:
    """The cost in USD of one response at a configured price (USD per million tokens); cached
    input tokens (part of ``inp``) at the ``cached`` price when one is set."""
    cached = min(cached, inp)
    cached_rate = price.input if price.cached is None else price.cached
    return ((inp - cached) * price.input + cached * cached_rate + out * price.output) / 1e6


def reprice(
    rows: Iterable[dict[str, Any]], prices: Mapping[str, ModelPrice]
) -> list[dict[str, Any]]:
    """``rows`` with the cost of each row whose model has a configured price (``[models.NAME]
    price``, :meth:`kernos.runtime.Config.prices`) set from it: a configured price wins over
    genai-prices' data; other rows keep their cost."""
    priced = []
    for row in rows:
        price = prices.get(row["model"] or "")
        if price is not None:
            cost = configured_cost(
                price, row["input_tokens"], row["output_tokens"], row["cached_tokens"]
            )
            row = {**row, "cost": cost}
        priced.append(row)
    return priced


def group_key(row: dict[str, Any], by: str) -> str:
    if by == "model":
        return row["model"] or "unknown"
    if by == "agent":
        return row["agent"] or "unknown"
    return row["task_id"] or "(main sessions)"


def aggregate(rows: Iterable[dict[str, Any]], by: str) -> list[dict[str, Any]]:
    """Sum rows per ``by`` group (``model``, ``agent`` or ``task``), largest input first.

    ``cost`` is the sum of each row's price (``row["cost"]``, None when unknown); a group with any
    unknown price has cost None (a partial sum would look complete).
    """
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = group_key(row, by)
        into = groups.setdefault(
            key,
            {by: key, "requests": 0, "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0,
             "cost": 0.0},
        )  # fmt: skip
        into["requests"] += 1
        for field in ("input_tokens", "output_tokens", "cached_tokens"):
            into[field] += row[field]
        if into["cost"] is not None:
            into["cost"] = None if row.get("cost") is None else into["cost"] + row["cost"]
    return sorted(groups.values(), key=lambda g: (-g["input_tokens"], g[by]))


def total(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Every row summed: requests, tokens, cost (None if any price is unknown)."""
    (only,) = aggregate(({**r, "agent": "all"} for r in rows), "agent") or [
        {"agent": "all", "requests": 0, "input_tokens": 0, "output_tokens": 0,
         "cached_tokens": 0, "cost": 0.0}
    ]  # fmt: skip
    only.pop("agent")
    return only


def cost_text(cost: float | None) -> str:
    return "cost unknown" if cost is None else f"cost ${cost:.4f}"


def summary_line(summed: dict[str, Any]) -> str:
    """``tokens: 1,234 in / 567 out · cost unknown`` (cached shown when any was reported)."""
    cached = f" ({summed['cached_tokens']:,} cached)" if summed["cached_tokens"] else ""
    return (
        f"tokens: {summed['input_tokens']:,} in{cached} / {summed['output_tokens']:,} out · "
        f"{cost_text(summed['cost'])}"
    )
