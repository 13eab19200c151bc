"""The pure rules of the ``task`` tool: normalization, clamping, resolution, every error code.

The seed's three scenarios run twice: with the real normalizer and with a no-op one. The no-op run
must come out differently (S1 and S2 wrongly rejected), which is the red half of the seed's
red/green record: these tests can fail, and do, when normalization is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tasks_helpers import S1, S1_NORMALIZED, S2, S3

from kernos.tasks import (
    TaskArgs,
    clamp_task_summary,
    normalize_task_arguments,
    resolve_run_in_background,
    resolve_spawn_items,
)

TARGETS: dict[str, Any] = {"categories": ["quick"], "agents": ["explore"]}


def noop(raw: Any) -> dict[str, Any]:
    return dict(raw) if isinstance(raw, dict) else {}


NORMALIZERS: list[Any] = [
    pytest.param(normalize_task_arguments, True, id="real"),
    pytest.param(noop, False, id="noop"),
]


def resolve(normalizer: Callable[[Any], dict[str, Any]], raw: Any, **kw: Any) -> Any:
    return resolve_spawn_items(normalizer(raw), **{**TARGETS, **kw})


# -- the seed's scenarios (red with a no-op normalizer, green with the real one) --------------


@pytest.mark.parametrize(("normalizer", "real"), NORMALIZERS)
def test_s1_padded_single_spawns_one_child(normalizer: Any, real: bool) -> None:
    normalized = normalizer(S1)
    result = resolve_spawn_items(normalized, **TARGETS)
    if real:
        assert normalized == S1_NORMALIZED
        assert list(normalized) == list(S1_NORMALIZED)
        assert result.kind == "ok"
        assert [(i.subagent_type, i.prompt) for i in result.items] == [
            ("explore", "TASK: Audit the task tool boundary.")
        ]
        assert result.background is True
    else:  # red: the padding item makes it look like prompt+tasks
        assert normalized != S1_NORMALIZED
        assert (result.kind, result.code) == ("error", "prompt_and_tasks")


@pytest.mark.parametrize(("normalizer", "real"), NORMALIZERS)
def test_s2_padded_batch_spawns_two_children(normalizer: Any, real: bool) -> None:
    result = resolve(normalizer, S2)
    if real:
        assert result.kind == "ok"
        assert len(result.items) == 2
        first, second = result.items
        assert (first.subagent_type, first.category) == ("explore", None)
        assert (second.category, second.subagent_type) == ("quick", None)
        assert first.load_skills == ["audit"] and second.load_skills == ["audit"]
        assert result.background is True and result.batch is True
    else:  # red: the padded top-level prompt "" and "" targets reject a meaningful batch
        assert result.kind == "error"


@pytest.mark.parametrize(("normalizer", "real"), NORMALIZERS)
def test_s3_genuine_ambiguity_stays_an_error(normalizer: Any, real: bool) -> None:
    result = resolve(normalizer, S3)
    assert (result.kind, result.code) == ("error", "prompt_and_tasks")
    assert result.message == "Provide EITHER prompt OR tasks, not both. Remove one and retry."
    assert result.items == []
    assert result.error is not None and result.error.code == "prompt_and_tasks"


def test_the_noop_normalizer_really_breaks_s1_and_s2() -> None:
    """The red/green record in one place: outcomes differ exactly where normalization matters."""
    outcomes = {
        name: [resolve(n, s).kind for s in (S1, S2, S3)]
        for name, n in (("real", normalize_task_arguments), ("noop", noop))
    }
    assert outcomes == {"real": ["ok", "ok", "error"], "noop": ["error", "error", "error"]}


# -- normalization -----------------------------------------------------------------------------


def test_summary_clamping() -> None:
    clamped = clamp_task_summary("Audit " + "z" * 200)
    assert clamped is not None and len(clamped) == 80 and clamped.endswith("...")
    assert clamped == ("Audit " + "z" * 200)[:77] + "..."
    assert clamp_task_summary("   ") is None
    assert clamp_task_summary("  Inspect the\n   schema surface  ") == "Inspect the schema surface"
    assert clamp_task_summary("x" * 80) == "x" * 80
    assert clamp_task_summary(7) is None


def test_over_long_summary_is_clamped_before_validation_so_it_never_fails_a_spawn() -> None:
    raw = {"prompt": "p", "category": "quick", "task_summary": "s" * 500}
    normalized = normalize_task_arguments(raw)
    assert normalized["task_summary"] == "s" * 77 + "..."
    result = resolve_spawn_items(TaskArgs.model_validate(normalized), **TARGETS)
    assert result.kind == "ok" and result.items[0].task_summary == "s" * 77 + "..."


def test_item_flags_true_false_absent_are_preserved() -> None:
    raw = {
        "tasks": [
            {"prompt": "a", "category": "quick", "run_in_background": True},
            {"prompt": "b", "category": "quick", "run_in_background": "false"},
            {"prompt": "c", "category": "quick", "run_in_background": None},
        ]
    }
    items = normalize_task_arguments(raw)["tasks"]
    assert [item.get("run_in_background", "absent") for item in items] == [True, False, "absent"]


def test_unknown_keys_dropped_and_field_helpers_applied() -> None:
    raw = {
        "prompt": "  keep me verbatim  ",
        "category": "  quick ",
        "subagent_type": "null",
        "model": "None",
        "load_skills": ["", "audit", 3, "  "],
        "tools": [],
        "run_in_background": "TRUE",
        "description": "   ",
        "surprise": "x",
    }
    assert normalize_task_arguments(raw) == {
        "prompt": "  keep me verbatim  ",
        "category": "quick",
        "load_skills": ["audit"],
        "run_in_background": True,
    }


@pytest.mark.parametrize("raw", [None, "text", 3, ["prompt"], True])
def test_non_object_normalizes_to_empty_and_fails_as_no_prompt_or_tasks(raw: Any) -> None:
    assert normalize_task_arguments(raw) == {}
    assert resolve_spawn_items(normalize_task_arguments(raw)).code == "no_prompt_or_tasks"


def test_blank_item_with_content_is_kept_empty_and_rejected_by_index() -> None:
    raw = {"tasks": [{"prompt": "real", "category": "quick"}, {"prompt": " ", "category": "quick"}]}
    normalized = normalize_task_arguments(raw)
    assert normalized["tasks"][1] == {"prompt": "", "category": "quick"}
    result = resolve_spawn_items(normalized, **TARGETS)
    assert result.code == "invalid_items"
    assert "item 2 (prompt:" in (result.message or "")


def test_content_less_blank_items_and_non_objects_are_dropped() -> None:
    raw = {"tasks": [{"prompt": "", "category": "", "load_skills": []}, "junk", 4, {}]}
    assert normalize_task_arguments(raw) == {"tasks": []}
    assert resolve_spawn_items(normalize_task_arguments(raw)).code == "empty_tasks"


@pytest.mark.parametrize("word", ["unused", " Placeholder ", "NOT USED", "n/a"])
def test_padding_word_items_around_a_real_prompt_make_a_single_call(word: str) -> None:
    raw = {"prompt": "real", "category": "quick", "tasks": [{"prompt": word, "name": "junk"}]}
    assert "tasks" not in normalize_task_arguments(raw)


def test_a_real_item_next_to_padding_keeps_the_batch_and_the_ambiguity() -> None:
    raw = {"prompt": "real", "tasks": [{"prompt": "unused"}, {"prompt": "also real"}]}
    normalized = normalize_task_arguments(raw)
    assert [t["prompt"] for t in normalized["tasks"]] == ["unused", "also real"]
    assert resolve_spawn_items(normalized).code == "prompt_and_tasks"


_SCALAR = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_ITEM = st.dictionaries(
    st.sampled_from(["prompt", "category", "run_in_background", "name"]), _SCALAR, max_size=4
)
_KEYS = st.sampled_from(
    ["prompt", "tasks", "category", "subagent_type", "model", "name", "load_skills", "tools",
     "run_in_background", "task_summary", "description", "x"]
)  # fmt: skip


@settings(deadline=None)  # a shared, noisy machine: no per-example timing
@given(st.dictionaries(_KEYS, _SCALAR | st.lists(_SCALAR | _ITEM, max_size=4)))
def test_no_input_crashes_and_every_rejection_has_a_code(raw: dict[str, Any]) -> None:
    normalized = normalize_task_arguments(raw)
    TaskArgs.model_validate(normalized)  # normalization always yields schema-valid arguments
    result = resolve_spawn_items(normalized, **TARGETS, tools=["read"])
    assert result.kind == "ok" or (result.code and result.message)


# -- every validation code -----------------------------------------------------------------------

CASES = [
    ("prompt_and_tasks", {"prompt": "a", "tasks": [{"prompt": "b", "category": "quick"}]}),
    ("no_prompt_or_tasks", {"category": "quick"}),
    ("empty_tasks", {"tasks": []}),
    ("too_many_tasks", {"tasks": [{"prompt": f"p{i}", "category": "quick"} for i in range(17)]}),
    ("both_targets", {"prompt": "a", "category": "quick", "subagent_type": "explore"}),
    ("category_with_model", {"prompt": "a", "category": "quick", "model": "openai-chat:x"}),
    ("no_target", {"prompt": "a"}),
    ("unknown_target", {"prompt": "a", "subagent_type": "explorer"}),
    ("invalid_items", {"tasks": [{"prompt": "a", "category": "quick"}, {"prompt": "b"}]}),
    (
        "run_in_background_conflict",
        {
            "run_in_background": True,
            "tasks": [{"prompt": "a", "category": "quick", "run_in_background": False}],
        },
    ),
    ("kernel_tool_missing", {"prompt": "a", "category": "quick", "tools": ["read", "task"]}),
]


@pytest.mark.parametrize(("code", "raw"), CASES, ids=[c for c, _ in CASES])
def test_every_validation_code(code: str, raw: dict[str, Any]) -> None:
    result = resolve_spawn_items(normalize_task_arguments(raw), **TARGETS, tools=["read"])
    assert (result.kind, result.code) == ("error", code)
    assert result.items == []
    assert result.details["status"] == "invalid_arguments"


def test_exact_messages() -> None:
    def message(raw: dict[str, Any]) -> str:
        result = resolve_spawn_items(raw, **TARGETS, tools=["read"])
        assert result.message is not None
        return result.message

    assert message(dict(CASES[1][1])) == "Provide EITHER prompt OR tasks. One field is required."
    assert message({"tasks": []}) == "tasks must contain at least one item."
    assert message(CASES[3][1]) == "tasks supports at most 16 items."
    assert message(CASES[4][1]) == (
        "Provide EITHER category OR subagent_type, not both. Remove one and retry."
    )
    assert message(CASES[5][1]) == (
        'Category "quick" takes its model from the category\'s config, so model cannot be set '
        "with it. Drop model, or use subagent_type to pick the model."
    )
    assert message(CASES[6][1]) == (
        'Each spawn needs exactly one of category or subagent_type. For example {"category": '
        '"quick", "prompt": "..."} runs a quick worker; {"subagent_type": "explore", "prompt": '
        '"..."} runs the explore agent.'
    )
    assert message(CASES[7][1]) == (
        'Unknown agent "explorer". Available categories: quick. Available agents: explore.'
    )
    assert message(CASES[9][1]) == (
        "run_in_background applies to the whole batch: set it once at the top level and remove "
        "it from the items. Values seen: true, false."
    )
    assert message(CASES[10][1]) == (
        'tools names "task", which is not one of your tools, so it cannot be granted; nothing '
        "was spawned. Grantable tools: read."
    )


def test_a_faulty_batch_is_rejected_whole_listing_every_faulty_item() -> None:
    raw = {
        "model": "openai-chat:big",
        "tasks": [
            {"prompt": "ok", "subagent_type": "explore"},
            {"prompt": "inherits a model", "category": "quick"},
            {"prompt": "no target"},
            {"prompt": "both", "category": "quick", "subagent_type": "explore"},
            {"prompt": "", "category": "nope"},
        ],
    }
    result = resolve_spawn_items(normalize_task_arguments(raw), **TARGETS)
    assert result.code == "invalid_items"
    assert result.message == (
        "Rejected 4 of 5 task items; nothing was spawned. Fix and resubmit the whole batch. "
        "Invalid: item 2 (model: a category's model comes from its config); "
        "item 3 (category: one of category or subagent_type is required); "
        "item 4 (category: give category or subagent_type, not both); "
        'item 5 (prompt: is blank; write the instruction; category: "nope" is not a configured '
        "category; model: a category's model comes from its config). "
        "Available categories: quick. Available agents: explore."
    )
    assert [entry["item"] for entry in result.details["items"]] == [2, 3, 4, 5]


# -- inheritance -----------------------------------------------------------------------------


def test_inheritance_rules() -> None:
    raw = {
        "category": "quick",
        "model": None,
        "load_skills": ["top"],
        "task_summary": "top summary",
        "name": "top-name",
        "tasks": [
            {"prompt": "a"},
            {"prompt": "b", "subagent_type": "explore", "model": "openai-chat:m"},
            {"prompt": "c", "load_skills": ["own"], "name": "c-name", "task_summary": "own"},
        ],
    }
    result = resolve_spawn_items(normalize_task_arguments(raw), **TARGETS)
    assert result.kind == "ok"
    a, b, c = result.items
    assert (a.category, a.subagent_type, a.load_skills) == ("quick", None, ["top"])
    assert (b.category, b.subagent_type, b.model) == (None, "explore", "openai-chat:m")
    assert (c.load_skills, c.name, c.task_summary) == (["own"], "c-name", "own")
    assert (a.name, a.task_summary, a.description) == (None, None, None)  # never inherited


def test_an_inherited_model_on_a_category_item_is_rejected() -> None:
    raw = {
        "model": "openai-chat:m",
        "tasks": [
            {"prompt": "a", "category": "quick"},
            {"prompt": "b", "subagent_type": "explore"},
        ],
    }
    result = resolve_spawn_items(normalize_task_arguments(raw), **TARGETS)
    assert result.code == "invalid_items" and "item 1 (model:" in (result.message or "")


def test_one_item_batch_runs_the_single_path() -> None:
    result = resolve_spawn_items({"tasks": [{"prompt": "a", "category": "quick"}]}, **TARGETS)
    assert result.kind == "ok" and len(result.items) == 1 and result.batch is False


def test_resolve_run_in_background() -> None:
    assert resolve_run_in_background({"prompt": "a"}).background is False
    assert resolve_run_in_background({"prompt": "a", "run_in_background": False}).value is False
    both_true = {"run_in_background": True, "tasks": [{"prompt": "a", "run_in_background": True}]}
    assert resolve_run_in_background(both_true).background is True
    item_only = {"tasks": [{"prompt": "a", "run_in_background": True}, {"prompt": "b"}]}
    assert resolve_run_in_background(item_only).background is True
    conflict = resolve_run_in_background(
        {
            "tasks": [
                {"prompt": "a", "run_in_background": True},
                {"prompt": "b", "run_in_background": False},
            ]
        }
    )
    assert (conflict.kind, conflict.code, conflict.seen) == (
        "error",
        "run_in_background_conflict",
        [True, False],
    )


def test_validation_order_shape_then_background_then_targets() -> None:
    raw = {"run_in_background": True, "tasks": [{"prompt": "a", "run_in_background": False}]}
    assert resolve_spawn_items(raw).code == "run_in_background_conflict"  # before no_target
    raw_shape = {
        "prompt": "a",
        "run_in_background": True,
        "tasks": [{"prompt": "b", "run_in_background": False}],
    }
    assert resolve_spawn_items(raw_shape).code == "prompt_and_tasks"


def test_resolve_accepts_a_config() -> None:
    from kernos.runtime import AgentConfig, CategoryConfig, Config

    config = Config(agents={"explore": AgentConfig()}, categories={"quick": CategoryConfig()})
    assert resolve_spawn_items({"prompt": "a", "category": "slow"}, config=config).code == (
        "unknown_target"
    )


DEEP = "[" * 10_000 + "]" * 10_000


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("[]", None),
        ('["read"]', ["read"]),
        (' [" audit ", "", null, 3, "none"] ', ["audit"]),
        ("[draft]", ["[draft]"]),  # not JSON: a one-entry list, as any other bare string
        (DEEP, [DEEP]),  # too deep to decode: no crash, read as any other bare string
        ('{"a": 1}', ['{"a": 1}']),
    ],
)
def test_a_list_field_sent_as_json_text_is_the_list_it_encodes(sent: str, kept: Any) -> None:
    raw = {"prompt": "Do it.", "subagent_type": "explore", "load_skills": sent, "tools": sent}
    out = normalize_task_arguments(raw)
    if kept is None:
        assert "load_skills" not in out and "tools" not in out
    else:
        assert out["load_skills"] == kept
        assert out["tools"] == kept
    item = normalize_task_arguments({"tasks": [{"prompt": "x", "load_skills": sent}]})["tasks"][0]
    assert item.get("load_skills") == kept


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t "])
def test_a_blank_single_prompt_is_no_prompt_whether_or_not_normalized(prompt: str) -> None:
    raw = {"prompt": prompt, "category": "quick"}
    for params in (raw, normalize_task_arguments(raw)):
        result = resolve_spawn_items(params, **TARGETS)
        assert (result.kind, result.code) == ("error", "no_prompt_or_tasks")
    batch = {"prompt": prompt, "tasks": [{"prompt": "Edit it.", "category": "quick"}]}
    assert resolve_spawn_items(batch, **TARGETS).kind == "ok"  # a blank prompt is no prompt
