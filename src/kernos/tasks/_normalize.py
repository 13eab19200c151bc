"""Normalization of ``task`` arguments: the tool's ``prepare``.

Pure and fast: one pass over the raw dict, no copies of what is dropped, nothing compiled per call.
Provider padding (``""``, ``[]``, ``"null"``, a synthetic ``{"prompt": "unused"}`` batch item)
becomes absence, so a legitimate single or batch call survives; genuine content is never dropped,
so real ambiguity still reaches validation and fails there with a code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernos.boundary import boolean_flag, identifier, is_padding_word, non_blank_text, string_list

#: Prompts a serializer writes into a batch item it was forced to fill.
PADDING_PROMPTS = frozenset({"unused", "placeholder", "not used", "n/a"})

#: The longest ``task_summary`` kept; longer ones are cut to 77 characters + ``...``.
SUMMARY_MAX = 80

_ELLIPSIS = "..."


def clamp_task_summary(value: Any) -> str | None:
    """A one-line label: trimmed, whitespace runs collapsed, blank → absent, at most 80 chars."""
    if not isinstance(value, str):
        return None
    collapsed = " ".join(value.split())
    if not collapsed:
        return None
    if len(collapsed) > SUMMARY_MAX:
        return collapsed[: SUMMARY_MAX - len(_ELLIPSIS)] + _ELLIPSIS
    return collapsed


# Each known key and the helper that cleans it. Top level and items share the helpers; only the
# key sets differ (``tools`` is top-level only; ``tasks`` and ``prompt`` are handled apart).
_FIELDS: dict[str, Callable[[Any], Any]] = {
    "description": non_blank_text,
    "task_summary": clamp_task_summary,
    "category": identifier,
    "subagent_type": identifier,
    "name": identifier,
    "model": identifier,
    "load_skills": string_list,
    "run_in_background": boolean_flag,
    "tools": string_list,
    "team": identifier,
}
_ITEM_FIELDS: dict[str, Callable[[Any], Any]] = {
    key: helper for key, helper in _FIELDS.items() if key != "tools"
}


def _normalize_item(raw: dict[str, Any], prompt: str | None) -> dict[str, Any]:
    """One object entry of ``tasks`` whose prompt is already cleaned: ``prompt`` first (``""``
    when blank), then the known keys."""
    return _put_known({"prompt": "" if prompt is None else prompt}, raw, _ITEM_FIELDS)


def _put_known(
    out: dict[str, Any], raw: dict[str, Any], fields: dict[str, Callable[[Any], Any]]
) -> dict[str, Any]:
    """``out`` with each key of ``raw`` that ``fields`` knows, cleaned by its helper; a key the
    helper maps to absence is left out."""
    for key, value in raw.items():
        # ``None``, ``""``, ``[]``, ``{}`` and ``0`` are what serializers pad with and every helper
        # maps them to absence, so they are skipped before the call; ``False`` is a value.
        if not value and value is not False:
            continue
        helper = fields.get(key)
        if helper is not None:
            cleaned = helper(value)
            if cleaned is not None:
                out[key] = cleaned
    return out


def normalize_task_arguments(raw: Any) -> dict[str, Any]:
    """Turn provider padding into absence; keep only the ``task`` tool's known keys.

    Never raises: a non-object becomes ``{}``. Every rule has its test in
    tests/tasks/test_rules.py, including the single-call rule: a real top-level ``prompt`` with an
    empty or all-padding ``tasks`` is a single spawn, so ``tasks`` is removed.
    """
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    prompt = non_blank_text(raw.get("prompt"))
    if prompt is not None:
        out["prompt"] = prompt  # first, whatever the raw order
    _put_known(out, raw, _FIELDS)
    raw_tasks = raw.get("tasks")
    if not isinstance(raw_tasks, list):
        return out  # null, "", or another odd shape: padding, not a batch
    items: list[dict[str, Any]] = []
    # Padding items (prompt "unused", ...) are only kept when the batch is: the common padded
    # single call drops them all, so their other fields are cleaned later, and only if needed.
    padding: list[int] = []
    real = 0
    for entry in raw_tasks:
        if not isinstance(entry, dict):
            continue  # not an object: dropped
        item_prompt = non_blank_text(entry.get("prompt"))
        if item_prompt is not None and is_padding_word(item_prompt, PADDING_PROMPTS):
            if prompt is not None:  # in place: if the batch is real, indexes must hold
                padding.append(len(items))
                items.append(entry)
            # without a top-level prompt, padding items are dropped: a child told "unused" is
            # never meant
            continue
        item = _normalize_item(entry, item_prompt)
        if item_prompt is None and len(item) == 1:
            continue  # a blank entry with no content at all is padding
        # a blank prompt with other content is kept (as "") so validation can name its index
        real += 1
        items.append(item)
    if prompt is not None and not real:
        return out  # the single-call rule: the batch was padding around a real single spawn
    for index in padding:
        entry = items[index]
        items[index] = _normalize_item(entry, non_blank_text(entry.get("prompt")))
    out["tasks"] = items
    return out
