"""Fixtures the CLI tests share."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._agents import CONFIG


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event a scripted answer is held on (``hold=``); set at the end so nothing waits on."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose kernos.toml has the main and explore agents (tests/_agents.py)."""
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    return tmp_path
