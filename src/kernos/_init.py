"""``kernos init``: find a model server, write ``kernos.toml`` and the ``.gitignore`` line.

The probe asks ``GET /v1/models`` of ``OPENAI_BASE_URL`` (when set), then of the usual local
ports on loopback only (Ollama 11434, vLLM 8000, llama.cpp 8080), each with a short timeout; the
first server that lists a model wins and its first model becomes ``default_model``. The text
written is :func:`kernos._starter.render_config`'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernos._starter import (
    ALIAS,
    FoundServer,
    first_model,
    gitignore_with_state,
    render_config,
)
from kernos.runtime import ConfigError

#: the loopback ports probed, in order, and the server that usually listens there
LOCAL_PORTS = ((11434, "Ollama"), (8000, "vLLM"), (8080, "llama.cpp"))
#: seconds to connect (loopback answers at once, or refuses) and to read the model list
CONNECT_TIMEOUT = 0.5
READ_TIMEOUT = 3.0


def _models_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/models"


def probe_server(base_url: str, api_key: str | None = None) -> Any:
    """The JSON body of ``GET {base_url}/models``, or None when nothing usable answers (refused,
    a timeout, an error status, not JSON). Proxies from the environment are not used."""
    import httpx2

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = httpx2.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT)
    try:
        with httpx2.Client(timeout=timeout, trust_env=False) as client:
            answer = client.get(_models_url(base_url), headers=headers)
        if answer.status_code != 200:
            return None
        return answer.json()
    except (httpx2.HTTPError, ValueError):
        return None


def find_server(environ: dict[str, str] | None = None) -> FoundServer | None:
    """The first OpenAI-compatible server that lists a model: ``OPENAI_BASE_URL``, then the
    local ports of :data:`LOCAL_PORTS` on 127.0.0.1; None when none does."""
    from kernos._starter import server_kind

    env = os.environ if environ is None else environ
    base = env.get("OPENAI_BASE_URL", "").strip()
    candidates: list[tuple[str, str, str]] = []
    if base:
        candidates.append((base.rstrip("/"), "", "OPENAI_BASE_URL"))
    for port, kind in LOCAL_PORTS:
        candidates.append((f"http://127.0.0.1:{port}/v1", kind, f"port {port}"))
    for url, kind, how in candidates:
        key = env.get("OPENAI_API_KEY") if how == "OPENAI_BASE_URL" else None
        body = probe_server(url, key)
        model = first_model(body)
        if model is not None:
            key_env = "OPENAI_API_KEY" if key else ""
            return FoundServer(url, model, server_kind(body, kind), how, key_env)
    return None


def server_at(base_url: str, model: str | None, found_by: str) -> FoundServer | None:
    """``base_url`` as a server with ``model``; no model: the first one it lists (asked now),
    None when it lists none."""
    from kernos._starter import server_kind

    url = base_url.strip().rstrip("/")
    if model:
        return FoundServer(url, model.strip(), "", found_by)
    body = probe_server(url)
    listed = first_model(body)
    return FoundServer(url, listed, server_kind(body), found_by) if listed else None


@dataclass
class InitResult:
    """What :func:`write_project` did: the files written (``written``), the server the config
    names (None: the commented template) and whether ``.gitignore`` was already right."""

    config: Path
    gitignore: Path
    server: FoundServer | None
    written: list[Path] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """``--json``'s document."""
        server = self.server
        return {
            "config": str(self.config),
            "gitignore": str(self.gitignore),
            "written": [str(p) for p in self.written],
            "template": server is None,
            "server": None
            if server is None
            else {
                "base_url": server.base_url,
                "model": server.model,
                "kind": server.kind,
                "found_by": server.found_by,
                "api_key_env": server.api_key_env or None,
            },
            "default_model": None if server is None else ALIAS,
        }


class ConfigExists(ConfigError):
    """``kernos init`` would replace a ``kernos.toml`` without ``--force``."""

    def __init__(self, target: Path) -> None:
        super().__init__(target, "kernos.toml", "already exists", "pass --force to replace it")
        self.args = (f"{target} already exists: edit it, or pass --force to replace it",)

    def __str__(self) -> str:
        return str(self.args[0])


def config_target(directory: Path, force: bool) -> Path:
    """Where ``kernos init`` writes the config in ``directory``.

    Raises:
        ConfigError: ``kernos.toml`` exists and ``force`` is not given.
    """
    target = directory / "kernos.toml"
    if target.exists() and not force:
        raise ConfigExists(target)
    return target


def write_project(directory: Path, server: FoundServer | None, *, force: bool) -> InitResult:
    """Write ``kernos.toml`` for ``server`` (None: the template) and add ``.kernos/`` to
    ``.gitignore`` (created if missing, never duplicated).

    Raises:
        ConfigError: ``kernos.toml`` exists and ``force`` is not given, or a file cannot be
            read or written (nothing is written when ``.gitignore`` cannot be read).
    """
    target = config_target(directory, force)
    result = InitResult(target, directory / ".gitignore", server)
    ignore = result.gitignore
    try:
        current = ignore.read_text(encoding="utf-8") if ignore.exists() else None
        target.write_text(render_config(server), encoding="utf-8")
        result.written.append(target)
        updated = gitignore_with_state(current)
        if updated is not None:
            ignore.write_text(updated, encoding="utf-8")
            result.written.append(ignore)
    except (OSError, UnicodeDecodeError) as exc:
        where = getattr(exc, "filename", None) or ignore
        raise ConfigError(
            where, "kernos init", f"cannot read or write it ({exc.__class__.__name__})", _WRITE_FIX
        ) from None
    return result


_WRITE_FIX = "check that it is a writable text file in a writable directory, then run it again"
