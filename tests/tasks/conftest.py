"""Fixtures for the task tests: a config with agent ``explore`` and category ``quick``, a runtime
pointed at the local OpenAI-compatible server, and helpers to script parent vs child replies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernos.runtime import Runtime, load_config
from kernos.testing import FakeOpenAIServer

CONFIG = """
default_model = "openai-chat:test"

[agents.main]
instructions = "MAIN-AGENT: you coordinate."

[agents.explore]
description = "Read-only research"
instructions = "EXPLORE-AGENT: you research."

[categories.quick]
description = "Small, fast edits"
model = "openai-chat:test"
instructions = "QUICK-WORKER: you edit."

[tasks]
concurrency = 5
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    monkeypatch.setenv("KERNOS_HOME", str(tmp_path / ".kernos"))
    monkeypatch.delenv("KERNOS_MODEL", raising=False)
    return tmp_path


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        yield fake


@pytest.fixture
def runtime(project: Path, server: FakeOpenAIServer) -> Iterator[Runtime]:
    rt = Runtime(load_config(cwd=project))
    yield rt
    rt.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each phase's report on its test (``item.report_call``...), for fixtures that explain a
    failure at teardown (test_dbos_cancel.py's ``explained``)."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report
