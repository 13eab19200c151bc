"""What ``kernos init`` writes: a commented ``kernos.toml`` and the ``.gitignore`` line (pure).

The probing and the writing are in ``kernos/_init.py``; here are only text in, text out, so each
rule is a one-line test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: the alias ``kernos init`` gives the model it found (``default_model = "local"``)
ALIAS = "local"
#: the line ``kernos init`` adds to ``.gitignore``: the state directory is never committed
GITIGNORE_LINE = ".kernos/"


@dataclass(frozen=True)
class FoundServer:
    """An OpenAI-compatible server: its base URL (ending in ``/v1``), the model to use, what
    kind of server it looks like (``Ollama``, ``vLLM``, ``llama.cpp``, or ``""``), how it was
    found (``OPENAI_BASE_URL``, ``port 11434``, ``--base-url``, ``asked``) and the variable
    holding its key (``""``: none)."""

    base_url: str
    model: str
    kind: str = ""
    found_by: str = ""
    api_key_env: str = ""


def _toml(value: str) -> str:
    """``value`` as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


def first_model(body: Any) -> str | None:
    """The first model id of a ``GET /v1/models`` answer, or None when it lists none. Pure."""
    data = body.get("data") if isinstance(body, dict) else None
    if isinstance(data, list):
        for entry in data:
            ident = entry.get("id") if isinstance(entry, dict) else None
            if isinstance(ident, str) and ident.strip():
                return ident.strip()
    models = body.get("models") if isinstance(body, dict) else None  # Ollama's /api/tags shape
    if isinstance(models, list):
        for entry in models:
            ident = entry.get("name") if isinstance(entry, dict) else None
            if isinstance(ident, str) and ident.strip():
                return ident.strip()
    return None


def server_kind(body: Any, port_kind: str = "") -> str:
    """The server a ``/v1/models`` answer comes from, by its ``owned_by`` (vLLM says ``vllm``,
    llama.cpp ``llamacpp``, Ollama ``library``), else ``port_kind`` (the port's usual server).
    Pure."""
    data = body.get("data") if isinstance(body, dict) else None
    owners = {
        str(entry.get("owned_by", "")).lower()
        for entry in (data if isinstance(data, list) else [])
        if isinstance(entry, dict)
    }
    for owner, kind in (("vllm", "vLLM"), ("llamacpp", "llama.cpp"), ("library", "Ollama")):
        if owner in owners:
            return kind
    return port_kind


_HEAD = """\
# kernos.toml, written by `kernos init`. Check it with `kernos config check`;
# every table and key, with its default: docs/config.md
"""

_REST = """\
[agents.main]                 # the agent `kernos run` talks to
# instructions = "You are a careful assistant for this repository."
# tools = ["read_file", "list_files", "search_files"]   # no key: the built-in workspace tools
# allowed_outputs = ["log"]   # no key: every channel

# [channels.log]              # an output channel the model may send to
# kind = "file"
# path = "out/messages.jsonl"

# [tasks]                     # sub-agent limits (every child's defaults)
# max_turns = 20
# timeout = "10m"

[workspace]
roots = ["."]                 # where model-supplied paths may lead
"""


def render_config(server: FoundServer | None) -> str:
    """The ``kernos.toml`` for ``server``; None: a commented template whose model lines are to
    be filled in. Both pass ``kernos config check``. Pure."""
    if server is None:
        model = f"""\
# No model server was found. Start one (Ollama: `ollama serve`, vLLM: `vllm serve MODEL`,
# llama.cpp: `llama-server -m MODEL.gguf`) and run `kernos init --force`, or edit the lines
# below: uncomment them and put your server's URL and model name.
# default_model = "{ALIAS}"

# [models.{ALIAS}]
# model = "openai-chat:MODEL"              # the name the server lists at GET /v1/models
# base_url = "http://127.0.0.1:11434/v1"   # Ollama; vLLM: 8000, llama.cpp: 8080
# api_key_env = "OPENAI_API_KEY"           # only if the server wants a key
"""
    else:
        where = f"the {server.kind} server" if server.kind else "the server"
        how = f" (found by {server.found_by})" if server.found_by else ""
        key = (
            f"api_key_env = {_toml(server.api_key_env)}     # the variable holding its key\n"
            if server.api_key_env
            else '# api_key_env = "OPENAI_API_KEY"   # only if the server wants a key\n'
        )
        model = f"""\
# The model: {where} at {server.base_url}{how}.
default_model = "{ALIAS}"

[models.{ALIAS}]
model = {_toml("openai-chat:" + server.model)}
base_url = {_toml(server.base_url)}
{key}# request_timeout = 600.0     # seconds one request may take (a slow local model)
"""
    return f"{_HEAD}\n{model}\n{_REST}"


def gitignore_with_state(text: str | None) -> str | None:
    """``.gitignore``'s new text with the state directory ignored, or None when it already is
    (``.kernos``, ``.kernos/``, ``/.kernos/`` ...); ``text`` None: no file yet. Pure."""
    lines = (text or "").splitlines()
    if any(line.strip().strip("/") == ".kernos" for line in lines):
        return None
    if text and not text.endswith("\n"):
        text += "\n"
    return f"{text or ''}{GITIGNORE_LINE}\n"
