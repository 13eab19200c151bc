"""The model-facing texts, loaded once from the ``prompts/`` files next to this module."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

#: Every model-facing text file of the task subsystem (a test pins their sizes).
PROMPT_FILES = (
    "task_description.md",
    "task_send.md",
    "task_output.md",
    "task_cancel.md",
    "child_preamble.md",
    "worker_instructions.md",
    "completion_notice.md",
    "still_running.md",
    "limit_reached.md",
    "not_delivered.md",
    # teams (kernos.tasks._teams)
    "team_send.md",
    "team_status.md",
    "team_wait.md",
    "board_add.md",
    "board_list.md",
    "board_update.md",
    "team_guidance.md",
    "team_mail.md",
    "compacted.md",
    # a child waiting on an approval request (kernos.tasks._approvals)
    "approval_wait.md",
)


@cache
def prompt_text(name: str) -> str:
    """The text of ``prompts/NAME``, without its trailing newline."""
    return resources.files("kernos.tasks").joinpath("prompts", name).read_text("utf-8").rstrip("\n")


def _entries(table: dict[str, Any]) -> str:
    if not table:
        return "(none configured)"
    lines = []
    for name in sorted(table):
        description = " ".join(str(getattr(table[name], "description", "") or "").split())
        lines.append(f"- {name}: {description}" if description else f"- {name}")
    return "\n".join(lines)


def build_task_description(config: Any) -> str:
    """The ``task`` tool description with the configured categories and agents filled in.

    Args:
        config: a :class:`kernos.runtime.Config` (only ``categories`` and the agents a task
            may name, ``spawnable_agents``, are read).
    """
    return prompt_text("task_description.md").format(
        categories=_entries(dict(config.categories)),
        agents=_entries(dict(config.spawnable_agents)),
    )
