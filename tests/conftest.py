"""Shared fixtures: a scripted local OpenAI-compatible server and an isolated kernos home."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernos.runtime import forget_secrets
from kernos.testing import FakeOpenAIServer

KERNOS = str(Path(os.sys.executable).with_name("kernos"))  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the developer's state or model settings."""
    monkeypatch.setenv("KERNOS_HOME", str(tmp_path / ".kernos"))
    for name in ("KERNOS_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "no-tiktoken-cache"))


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    """The scrubber's registry is process-wide: one test's secrets never shred another's text."""
    forget_secrets()
    yield
    forget_secrets()


@pytest.fixture(autouse=True)
def _no_remote_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Block connections to anything but loopback: tests never reach a real provider."""
    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: object) -> object:
        host = address[0] if isinstance(address, tuple) else None
        if isinstance(host, str) and host not in ("127.0.0.1", "::1", "localhost"):
            raise OSError(f"test tried to reach {host}: tests run offline against loopback")
        return real_connect(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", guarded)


ENGINES = ("lean", "pydantic-ai")


def pytest_report_header() -> str:
    """Which model engine the suite runs on: ``KERNOS_ENGINE=pydantic-ai pytest`` runs every
    OpenAI-compatible session on pydantic-ai (``make pytest`` does a second pass that way)."""
    return f"kernos engine: {os.environ.get('KERNOS_ENGINE') or 'default (lean for openai-chat)'}"


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once per engine (``KERNOS_ENGINE`` set for the process and subprocesses)."""
    monkeypatch.setenv("KERNOS_ENGINE", request.param)
    return str(request.param)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def openai_env(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAIServer:
    """Point ``openai-chat:`` at the local server for in-process tests."""
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    return server
