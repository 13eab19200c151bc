"""``kernos mcp`` over stdio, driven by the official ``mcp`` SDK client (a client no one here
wrote): both protocol eras, raw arguments through the boundary, long calls, notices, cancel."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from kernos.runtime import Store
from kernos.tasks import TaskStore
from kernos.testing import FakeOpenAIServer, text
from tests._wait import until
from tests.serve.conftest import KERNOS, server_env
from tests.tasks.tasks_helpers import S1, agent_is

XOR = "Provide EITHER prompt OR tasks"
IDS = re.compile(r"t_[0-9a-f]{8}")
ERAS = ["legacy", "2026-07-28"]  # the 2025-11-25 handshake, and the per-request envelope


@asynccontextmanager
async def connect(
    project: Path, model: FakeOpenAIServer, *args: str, mode: str = "legacy"
) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=KERNOS, args=["mcp", *args], env=server_env(project, model), cwd=str(project)
    )
    async with Client(params, mode=mode) as client:
        yield client


def only_text(result: CallToolResult) -> str:
    assert result.structured_content is None  # OpenCode would show it instead of the text
    (block,) = result.content
    assert block.type == "text"
    return block.text


def statuses(project: Path) -> dict[str, str]:
    store = Store.open(project / ".kernos")
    try:
        return {row["id"]: row["status"] for row in TaskStore(store).recent()}
    finally:
        store.close()


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_of_the_agent_plus_compress_and_raw_padded_s1(
    project: Path, server: FakeOpenAIServer, mode: str
) -> None:
    server.script(text("boundary audited", when=agent_is("EXPLORE-AGENT")))
    async with connect(project, server, mode=mode) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"task", "task_send", "task_output", "task_cancel", "compress"} <= names
        assert {"output_send__log", "output_list_channels", "read_file"} <= names
        started = await client.call_tool("task", S1)  # GPT padding: "", [], a synthetic item
        said = only_text(started)
        assert not started.is_error, said
        assert XOR not in said
        assert said.startswith("Started task Audit task tool (t_")


@pytest.mark.parametrize("mode", ERAS)
async def test_bad_arguments_are_is_error_results_with_the_coded_text(
    project: Path, server: FakeOpenAIServer, mode: str
) -> None:
    async with connect(project, server, mode=mode) as client:
        both = await client.call_tool("task", {"prompt": "a", "tasks": [{"prompt": "b"}]})
        assert both.is_error
        assert only_text(both) == "Provide EITHER prompt OR tasks, not both. Remove one and retry."
        wrong = await client.call_tool("task_output", {"mode": "everything", "task_id": "t_1"})
        assert wrong.is_error
        assert only_text(wrong).startswith("Invalid arguments for tool `task_output`:")
        missing = await client.call_tool("no_such_tool", {})
        assert missing.is_error
        assert "no tool `no_such_tool`" in only_text(missing)
        sent = await client.call_tool("output_send__log", {"payload": ["one"], "type": ""})
        assert (sent.is_error, only_text(sent)) == (False, "sent 1 message via [log]")
    assert (project / "out/log.jsonl").read_text().count('"payload": "one"') == 1


async def test_foreground_wait_expiry_answers_still_running_then_the_notice_comes_later(
    project: Path, server: FakeOpenAIServer
) -> None:
    release = threading.Event()
    server.script(text("slow answer", when=agent_is("EXPLORE-AGENT"), hold=release))
    call = {"prompt": "Take your time.", "subagent_type": "explore", "run_in_background": False}
    async with connect(project, server, "--foreground-wait", "1") as client:
        progress: list[tuple[float, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, message))

        waited = await client.call_tool("task", call, progress_callback=on_progress)
        said = only_text(waited)
        assert not waited.is_error, said
        (task_id,) = set(IDS.findall(said))
        assert said.startswith(f"Task Take your time. ({task_id}) is still running after 1 s")
        assert f'task_output(task_id="{task_id}")' in said
        assert progress and progress[0][1] is not None  # the token was honoured while waiting
        release.set()

        async def output() -> str | None:  # the child finishes on its own; the next result
            said = only_text(await client.call_tool("task_output", {"task_id": task_id}))
            return said if "task completion" in said else None  # carries its notice

        result = await until(output, "the notice in task_output")
        assert result.startswith(f"{task_id} completed")
        assert f"task completion name:- id:{task_id} status:completed" in result
        assert 'result: "slow answer"' in result
    assert statuses(project) == {task_id: "completed"}


async def test_cancelling_a_foreground_task_call_cancels_the_child(
    project: Path, server: FakeOpenAIServer
) -> None:
    release = threading.Event()
    server.script(text("never seen", when=agent_is("EXPLORE-AGENT"), hold=release))
    call = {"prompt": "Work long.", "subagent_type": "explore", "run_in_background": False}
    try:
        async with connect(project, server) as client:
            running = asyncio.ensure_future(client.call_tool("task", call))
            await until(lambda: statuses(project), "the child recorded")
            running.cancel()  # the SDK sends notifications/cancelled for the request
            with pytest.raises(asyncio.CancelledError):
                await running
            (task_id,) = statuses(project)

            async def cancelled() -> bool:
                listing = only_text(await client.call_tool("task_output", {"task_id": task_id}))
                return listing.startswith(f"{task_id} cancelled")

            await until(cancelled, "task_output to say cancelled")
    finally:
        release.set()
    assert statuses(project) == {task_id: "cancelled"}


async def test_children_still_running_when_the_host_leaves_are_cancelled_not_lost(
    project: Path, server: FakeOpenAIServer
) -> None:
    release = threading.Event()
    server.script(text("late", when=agent_is("EXPLORE-AGENT"), hold=release))
    background: dict[str, Any] = {
        "prompt": "Background.",
        "subagent_type": "explore",
        "run_in_background": True,
    }
    try:
        async with connect(project, server) as client:
            said = only_text(await client.call_tool("task", background))
            (task_id,) = set(IDS.findall(said))
            assert statuses(project) == {task_id: "running"}
    finally:
        release.set()
    assert statuses(project) == {task_id: "cancelled"}
