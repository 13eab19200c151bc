"""A ``FakeOpenAIServer`` in a process of its own, for benchmarks that run a model over HTTP.

The server's threads then do not share the measured process's CPU or GIL. ``served(script,
latency)`` starts ``python bench/_http.py SCRIPT LATENCY`` and yields its base URL; the scripts:

* ``done`` — every request answered with the text ``done``;
* ``compress`` — the compress loop's three turns (``rewrite``, end of turn, ``approve`` at
  review), as ``bench/compress.py``'s in-process ``FunctionModel`` answers them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _last(request: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = request["messages"][-1]
    return message


def _is_review(request: dict[str, Any]) -> bool:
    content = _last(request).get("content")
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return _last(request)["role"] == "user" and str(content).startswith("Review of draft")


def _script(name: str) -> list[Any]:
    from kernos.testing import text, tool_call

    if name == "done":
        return [text("done", repeat=True)]
    draft = {"text": "Answer politely. Timeout: default 30s.", "losses": []}
    return [
        text("Draft submitted.", when=lambda r: _last(r)["role"] == "tool", repeat=True),
        tool_call("approve", {"verdict": "Stands alone."}, when=_is_review, repeat=True),
        tool_call("rewrite", draft, repeat=True),
    ]


@contextmanager
def served(script: str, latency: float = 0.0) -> Iterator[str]:
    """Run the server for ``script`` answering after ``latency`` seconds; yield its base URL."""
    process = subprocess.Popen(
        [sys.executable, __file__, script, str(latency)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.communicate("")


def http_model(base_url: str) -> Any:
    """An ``openai-chat`` model on ``base_url`` (driven over the pooled wire)."""
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base_url, api_key="bench-key")
    return OpenAIChatModel("scripted", provider=provider)


if __name__ == "__main__":
    from kernos.testing import FakeOpenAIServer

    with FakeOpenAIServer(*_script(sys.argv[1]), delay=float(sys.argv[2])) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()  # until the benchmark closes it
