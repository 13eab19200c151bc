"""Helpers for compress tests: scripted agents for the local OpenAI-compatible server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kernos.testing import FakeOpenAIServer, Reply, text, tool_call

MODEL = "openai-chat:test"
NL = "\n"


def loss(content: str, reason: str) -> dict[str, str]:
    return {"content": content, "reason": reason}


def rewrite(draft: str, losses: list[dict[str, str]] | None = None, **when: Any) -> Reply:
    return tool_call("rewrite", {"text": draft, "losses": losses or []}, **when)


def approve(verdict: str = "Stands alone; every loss is safe.", **when: Any) -> Reply:
    return tool_call("approve", {"verdict": verdict}, **when)


def approving_agent(
    name: str, draft: str, losses: list[dict[str, str]] | None = None
) -> list[Reply]:
    """An agent that drafts ``name``, ends its turn, and approves at the review of that draft."""
    return [
        rewrite(draft, losses, when=f"Compress the file {name}."),
        text("Draft submitted.", when="recorded: ", repeat=True),
        approve(when=f"\n{draft}{'' if draft.endswith(NL) else NL}</draft-"),
    ]


def messages(request: dict[str, Any], role: str) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == role]


def user_turns(server: FakeOpenAIServer) -> list[str]:
    """Every user turn sent, in order (the last request holds the whole conversation)."""
    return messages(server.requests[-1], "user")


def nonce_of(turn: str, kind: str) -> str:
    found = re.search(rf"<{kind}-([0-9a-f]{{8}})>", turn)
    assert found, turn
    return found.group(1)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's working directory: relative labels, no stray kernos.toml."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
