"""The model-facing texts: built from template files, sizes printed and pinned (a change in size
shows in review), and no rule stated twice across the task tool and its companions."""

from __future__ import annotations

from inline_snapshot import snapshot

from kernos.runtime import AgentConfig, CategoryConfig, Config
from kernos.tasks import PROMPT_FILES, build_task_description, prompt_text

CONFIG = Config(
    agents={"explore": AgentConfig(description="Read-only research")},
    categories={"quick": CategoryConfig(description="Small, fast edits"), "deep": CategoryConfig()},
)


def test_description_lists_sorted_categories_and_agents() -> None:
    text = build_task_description(CONFIG)
    assert (
        "Categories:\n- deep\n- quick: Small, fast edits\n\nAgents:\n- explore: Read-only research"
        in text
    )
    assert "Blank provider padding is cleaned automatically" in text
    assert "Never send it with `category`" in text
    assert "`task_send` continues an existing one" in text


def test_description_says_none_configured_and_offers_the_built_in_general() -> None:
    text = build_task_description(Config())
    assert "Categories:\n(none configured)\n\nAgents:\n- general: General-purpose" in text


def test_sizes_of_every_model_facing_text_are_pinned() -> None:
    sizes = {name: len(prompt_text(name)) for name in PROMPT_FILES}
    sizes["task description (rendered, test config)"] = len(build_task_description(CONFIG))
    for name, size in sizes.items():
        print(f"{name}: {size} chars")
    assert sizes == snapshot(
        {
            "task_description.md": 1608,
            "task_send.md": 415,
            "task_output.md": 245,
            "task_cancel.md": 138,
            "child_preamble.md": 199,
            "worker_instructions.md": 144,
            "completion_notice.md": 210,
            "still_running.md": 291,
            "limit_reached.md": 109,
            "not_delivered.md": 299,
            "team_send.md": 243,
            "team_status.md": 146,
            "team_wait.md": 253,
            "board_add.md": 93,
            "board_list.md": 110,
            "board_update.md": 234,
            "team_guidance.md": 296,
            "team_mail.md": 48,
            "compacted.md": 130,
            "approval_wait.md": 376,
            "task description (rendered, test config)": 1736,
        }
    )


def test_no_rule_is_stated_twice() -> None:
    description = build_task_description(Config())
    companions = [prompt_text(n) for n in ("task_send.md", "task_output.md", "task_cancel.md")]
    sentences = {s.strip() for s in description.split(".") if len(s.strip()) > 20}
    for text in companions:
        assert not sentences & {s.strip() for s in text.split(".")}
    assert "revived" not in description and "category" not in " ".join(companions)
