"""Fixtures for ``kernos mcp``: a project whose model is the local OpenAI-compatible server, and
the server's command line for the real clients (the SDK, pydantic-ai, the MCP Inspector)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer
from tests.conftest import KERNOS

CONFIG = """
default_model = "openai-chat:test"

[agents.main]
instructions = "MAIN-AGENT: you coordinate."
allowed_outputs = ["log"]

[agents.explore]
description = "Read-only research"
instructions = "EXPLORE-AGENT: you research."

[channels.log]
kind = "file"
description = "Audit log."
path = "out/log.jsonl"

[tasks]
concurrency = 5
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    (tmp_path / "prompt.md").write_text("Please, if you would, always answer briefly.\n")
    return tmp_path


@pytest.fixture
def model(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """The local model server, also for in-process sessions."""
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    yield server


def server_env(project: Path, model: FakeOpenAIServer, **extra: str) -> dict[str, str]:
    """The environment ``kernos mcp`` runs in: the project's home, the local model server."""
    base = {k: v for k, v in os.environ.items() if k not in ("KERNOS_MODEL", "OPENAI_API_KEY")}
    return {**base, "KERNOS_HOME": str(project / ".kernos"), **model.env(), **extra}


def server_command(*args: str) -> list[str]:
    return [KERNOS, "mcp", *args]
