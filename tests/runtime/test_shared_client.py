"""Every openai-chat model on one endpoint shares one pooled httpx2 client, across
model names, aliases and runtimes of the process."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kernos.runtime import Runtime
from kernos.testing import FakeOpenAIServer, text


def http_client(model: Any) -> Any:
    """The httpx2 client under a (wrapped) openai-chat model."""
    while hasattr(model, "wrapped"):
        model = model.wrapped
    return model.client._client


async def test_two_sessions_on_one_endpoint_share_one_http_client(
    openai_env: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[agents.main]\nmodel = "openai-chat:m1"\n'
        '[agents.other]\nmodel = "local"\n'
        f'[models.local]\nmodel = "openai-chat:m2"\nbase_url = "{openai_env.base_url}"\n'
        'api_key_env = "OPENAI_API_KEY"\n'
    )
    first, second = Runtime.open(cwd=tmp_path), Runtime.open(cwd=tmp_path)
    openai_env.script(text("one"), text("two"))
    one, two = first.session("main"), second.session("other")
    assert await asyncio.gather(one.prompt("a"), two.prompt("b")) in (
        ["one", "two"],
        ["two", "one"],
    )
    assert {r["model"] for r in openai_env.requests} == {"m1", "m2"}
    shared = http_client(one.model)
    assert shared is http_client(two.model)
    assert type(shared).__module__.startswith("httpx2")
    first.close()
    second.close()


def test_another_endpoint_gets_its_own_client(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[models.a]\nmodel = "openai-chat:m"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[models.b]\nmodel = "openai-chat:m"\nbase_url = "http://127.0.0.1:10/v1"\n'
    )
    runtime = Runtime.open(cwd=tmp_path)
    assert http_client(runtime.model("a")) is not http_client(runtime.model("b"))
    assert http_client(runtime.model("a")) is http_client(Runtime.open(cwd=tmp_path).model("a"))
    runtime.close()
