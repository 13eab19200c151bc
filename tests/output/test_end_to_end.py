"""End to end over real HTTP: the local OpenAI-compatible server drives `run_agent`, whose
session gets the output tools through `OutputToolset`; channels deliver to a file and a
loopback webhook."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from kernos._app import run_agent
from kernos.runtime import Runtime
from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.output.conftest import Received, Receiver


def runtime(tmp_path: Path, hook_url: str = "http://127.0.0.1:9/") -> Runtime:
    (tmp_path / "kernos.toml").write_text(
        textwrap.dedent(f"""
        [agents.main]
        allowed_outputs = ["log", "hook"]

        [channels.log]
        kind = "file"
        description = "Audit log."
        path = "out/log.jsonl"

        [channels.hook]
        kind = "webhook"
        url = "{hook_url}"

        [channels.pager]
        kind = "webhook"
        url = "{hook_url}"
        """)
    )
    return Runtime.open(tmp_path / "kernos.toml", cwd=tmp_path, model="openai-chat:test")


def offered(server: FakeOpenAIServer) -> set[str]:
    return {t["function"]["name"] for t in server.requests[0].get("tools", [])}


def written(tmp_path: Path) -> list[dict[str, Any]]:
    log = tmp_path / "out/log.jsonl"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


async def test_a_batch_to_a_file_and_a_mismatched_call(
    openai_env: FakeOpenAIServer, tmp_path: Path
) -> None:
    openai_env.script(
        tool_call(
            "output_send__log",
            {
                "payload": ["one", "two", "three"],
                "type": ["text", "markdown", "text"],
                "meta": {"run": 7},
            },
        ),
        tool_call(
            "output_send__log", {"payload": ["four", "five"], "type": ["text", "text", "text"]}
        ),
        text("done"),
    )
    rt = runtime(tmp_path)
    try:
        outcome = await run_agent(rt, "log the run")
    finally:
        rt.close()
    assert outcome.ok and outcome.text == "done"
    assert {"output_send__log", "output_send__log_help", "output_list_channels"} <= offered(
        openai_env
    )
    batch, mismatch = openai_env.tool_results()
    assert batch == "sent 3 messages via [log]"
    assert mismatch.startswith("`payload` has 2 entries, `type` has 3")
    assert [(x["payload"], x["type"], x["meta"]) for x in written(tmp_path)] == [
        ("one", "text", '{"run":7}'),
        ("two", "markdown", '{"run":7}'),
        ("three", "text", '{"run":7}'),
    ]


async def test_a_failing_item_does_not_lose_the_next(
    openai_env: FakeOpenAIServer, receiver: Receiver, tmp_path: Path
) -> None:
    def respond(request: Received) -> tuple[int, Any]:
        if request.body["payload"] == "b":
            return 422, "image too large"
        return 200, {}

    receiver.respond = respond
    openai_env.script(
        tool_call(
            "output_send__hook", {"payload": ["a", "b", "c"], "type": ["text", "image", "text"]}
        ),
        text("reported"),
    )
    rt = runtime(tmp_path, receiver.url)
    try:
        await run_agent(rt, "notify")
    finally:
        rt.close()
    assert [r.body["payload"] for r in receiver.received] == ["a", "b", "c"]
    assert openai_env.tool_results() == [
        "sent 2/3 messages via [hook]:\n"
        "[1] text ok\n"
        "[2] image failed: HTTP 422: image too large\n"
        "[3] text ok\n"
        "Resend only the failed items."
    ]


async def test_a_channel_the_agent_may_not_use_has_no_tool(
    openai_env: FakeOpenAIServer, receiver: Receiver, tmp_path: Path
) -> None:
    openai_env.script(
        tool_call("output_send__pager", {"payload": ["wake", "up"]}),
        text("could not"),
    )
    rt = runtime(tmp_path, receiver.url)
    try:
        outcome = await run_agent(rt, "page someone")
    finally:
        rt.close()
    assert outcome.text == "could not"
    assert not any(name.startswith("output_send__pager") for name in offered(openai_env))
    assert receiver.received == []
