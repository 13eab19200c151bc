"""Helpers shared by the task tests: the seed scenarios (S1–S3, quoted verbatim) and
``when=`` matchers that tell a parent's requests from its children's."""

# ruff: noqa: E501  (the seed scenarios are quoted verbatim)

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from kernos.testing import FakeOpenAIServer

S1 = json.loads(
    """{"prompt":"TASK: Audit the task tool boundary.","description":"Audit task tool","category":"","subagent_type":"explore",
 "run_in_background":true,"name":"task-padding-audit","model":"","load_skills":[],
 "tasks":[{"prompt":"unused","description":"unused","category":"quick","subagent_type":"","name":"unused","model":"","load_skills":[]}]}"""
)
S1_NORMALIZED = json.loads(
    """{"prompt":"TASK: Audit the task tool boundary.","description":"Audit task tool","subagent_type":"explore","run_in_background":true,"name":"task-padding-audit"}"""
)
S2 = json.loads(
    """{"prompt":"","description":"","category":"","subagent_type":"","run_in_background":true,"name":"","model":"","load_skills":["audit"],
 "tasks":[{"prompt":"TASK: Inspect the argument schema.","description":"","category":"","subagent_type":"explore","name":"","model":"","load_skills":[]},
          {"prompt":"TASK: Inspect the prompt surfaces.","description":"","category":"quick","subagent_type":"","name":"","model":"","load_skills":[]}]}"""
)
S3 = json.loads(
    """{"prompt":"TASK: Run the single assignment.","subagent_type":"explore","tasks":[{"prompt":"TASK: Run the separate batch assignment.","category":"quick"}]}"""
)


def messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request.get("messages") or [] if isinstance(m, dict)]


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def system(request: dict[str, Any]) -> str:
    return "\n".join(
        text_of(m) for m in messages(request) if m.get("role") in ("system", "developer")
    )


def last(request: dict[str, Any]) -> dict[str, Any]:
    return messages(request)[-1]


def agent_is(
    marker: str, latest: str | None = None, role: str | None = None
) -> Callable[..., bool]:
    """A ``when=`` for requests of the agent whose instructions contain ``marker``, optionally
    whose last message (of ``role``) contains ``latest``."""

    def match(request: dict[str, Any]) -> bool:
        if marker not in system(request):
            return False
        final = last(request)
        if role is not None and final.get("role") != role:
            return False
        return latest is None or latest in text_of(final)

    match.__name__ = f"agent_is({marker!r}, {latest!r})"
    return match


def user_texts(server: FakeOpenAIServer, marker: str) -> list[str]:
    """Every distinct user message the agent with ``marker`` received."""
    seen: list[str] = []
    for request in server.requests:
        if marker in system(request):
            for message in messages(request):
                if message.get("role") == "user" and text_of(message) not in seen:
                    seen.append(text_of(message))
    return seen


def seen(match: Callable[[dict[str, Any]], bool], event: threading.Event) -> Callable[..., bool]:
    """``match``, setting ``event`` once a request matches it: a test holds another answer on
    ``event`` until that request has arrived (a child running, not still queued)."""

    def check(request: dict[str, Any]) -> bool:
        if match(request):
            event.set()
            return True
        return False

    return check
