"""A main agent and an explore agent for tests that drive ``kernos run`` with a child: their
config, the ``task`` call that spawns the child, and a matcher telling their requests apart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CONFIG = """
default_model = "openai-chat:test"

[agents.main]
instructions = "MAIN-AGENT: you coordinate."

[agents.explore]
description = "Read-only research"
instructions = "EXPLORE-AGENT: you research."
"""
SPAWN = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
         "run_in_background": True}  # fmt: skip


def agent_is(marker: str, latest: str = "") -> Callable[[dict[str, Any]], bool]:
    """A request of the agent whose instructions hold ``marker`` (whose latest message holds
    ``latest``)."""

    def match(request: dict[str, Any]) -> bool:
        messages = request.get("messages") or [{}]
        return marker in str(messages[0].get("content", "")) and latest in str(messages[-1])

    return match
