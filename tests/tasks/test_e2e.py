"""End to end over real HTTP: the local OpenAI-compatible server drives ``openai-chat:``
sessions; the task tools run through the same wiring ``kernos run`` uses."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from tasks_helpers import S1, S2, S3, agent_is, messages, text_of, user_texts
from tests import _wait as wait

from kernos._app import run_agent
from kernos.boundary import ToolSpec
from kernos.runtime import Runtime
from kernos.tasks import TaskManager, TaskStore
from kernos.testing import FakeOpenAIServer, text, tool_call

XOR = "Provide EITHER prompt OR tasks"
IDS = re.compile(r"t_[0-9a-f]{8}")


def statuses(runtime: Runtime) -> dict[str, str]:
    return {row["id"]: row["status"] for row in TaskStore(runtime.store).recent()}


async def test_s1_padded_single_spawns_a_child_that_completes_and_wakes_the_parent(
    runtime: Runtime, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call("task", S1, when=agent_is("MAIN-AGENT", "audit please")),
        text("Child started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("boundary audited: 3 findings", when=agent_is("EXPLORE-AGENT")),
        text("All done.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    outcome = await run_agent(runtime, "audit please")
    assert outcome.ok, outcome.error
    assert outcome.text == "All done."
    server.assert_all_consumed()
    results = server.tool_results()
    assert not any(XOR in r for r in results)
    assert results[0].startswith("Started task Audit task tool (t_")
    (task_id,) = set(IDS.findall(results[0]))
    assert statuses(runtime) == {task_id: "completed"}
    notices = [t for t in user_texts(server, "MAIN-AGENT") if t.startswith("task completion")]
    assert len(notices) == 1
    assert notices[0].startswith(
        f"task completion name:task-padding-audit id:{task_id} status:completed"
    )
    assert 'result: "boundary audited: 3 findings"' in notices[0]
    # the child really was a child: sub-task preamble first, and no task tools offered to it
    child = next(r for r in server.requests if "EXPLORE-AGENT" in text_of(messages(r)[0]))
    first = next(text_of(m) for m in messages(child) if m.get("role") == "user")
    assert first.startswith(f"You are sub-task {task_id}, started by session ")
    assert first.endswith("TASK: Audit the task tool boundary.")
    child_tools = {t["function"]["name"] for t in child.get("tools", [])}
    assert not child_tools & {"task", "task_send", "task_output", "task_cancel"}
    parent = server.requests[0]
    assert {t["function"]["name"] for t in parent["tools"]} >= {
        "task",
        "task_send",
        "task_output",
        "task_cancel",
    }


class _Nothing(BaseModel):
    pass


def busy_tool(until: Callable[[], object], what: str) -> ToolSpec[_Nothing]:
    """A tool that keeps its caller busy until ``until()`` holds."""

    async def run(params: _Nothing, ctx: Any) -> str:
        await wait.until(until, what)
        return "waited"

    return ToolSpec("wait_a_bit", "Wait a little.", _Nothing, run)


async def test_padded_background_batch_of_two_runs_both_and_wakes_the_parent_once(
    runtime: Runtime, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call("task", S2, when=agent_is("MAIN-AGENT", "fan out")),
        # the parent stays busy while both children finish: their notices become ONE turn
        tool_call("wait_a_bit", {}, when=agent_is("MAIN-AGENT", "Batch running.")),
        text("Waiting for the batch.", when=agent_is("MAIN-AGENT", "waited")),
        text("schema report", when=agent_is("EXPLORE-AGENT")),
        text("prompt report", when=agent_is("QUICK-WORKER")),
        text("Both in.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    manager = TaskManager(runtime)

    def both_noticed() -> bool:  # notices of one loop turn are queued as one message
        ended = [r.status == "completed" for r in manager.children(session)]
        return ended == [True, True] and session.pending_messages >= 1

    session = runtime.session("main", tools=[busy_tool(both_noticed, "both children's notices")])
    session.add_tools(manager.tools_for(session))
    final = await manager.drive(session, "fan out")
    await manager.aclose(wait=True)
    assert final == "Both in."
    server.assert_all_consumed()
    started = server.tool_results()[0]
    assert started.startswith("Batch running.\n1. TASK: Inspect the argument schema. t_")
    ids = IDS.findall(started)
    assert len(ids) == 2
    notices = [t for t in user_texts(server, "MAIN-AGENT") if "task completion" in t]
    assert len(notices) == 1, notices  # both notices, one turn
    assert all(f"id:{task_id} status:completed" in notices[0] for task_id in ids)
    assert statuses(runtime) == dict.fromkeys(ids, "completed")


async def test_genuine_prompt_and_tasks_is_the_xor_error_and_spawns_nothing(
    runtime: Runtime, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call("task", S3, when=agent_is("MAIN-AGENT", "both please")),
        text("I will pick one.", when=agent_is("MAIN-AGENT", XOR)),
    )
    outcome = await run_agent(runtime, "both please")
    assert outcome.text == "I will pick one."
    assert server.tool_results() == [
        "Provide EITHER prompt OR tasks, not both. Remove one and retry."
    ]
    assert statuses(runtime) == {}
    assert not any("EXPLORE-AGENT" in json.dumps(r) for r in server.requests)


async def test_task_send_revives_the_same_child_conversation(
    runtime: Runtime, server: FakeOpenAIServer
) -> None:
    first = {"prompt": "Find the config loader.", "subagent_type": "explore", "name": "finder",
             "category": "", "tasks": []}  # fmt: skip
    server.script(
        tool_call("task", first, when=agent_is("MAIN-AGENT", "find it")),
        text("It is in _config.py.", when=agent_is("EXPLORE-AGENT", "Find the config loader.")),
        tool_call(
            "task_send",
            {"to": "finder", "message": "Which function loads it?", "deliver_as": ""},
            when=agent_is("MAIN-AGENT", "It is in _config.py."),
        ),
        text("Revived; waiting.", when=agent_is("MAIN-AGENT", "Revived")),
        text("load_config().", when=agent_is("EXPLORE-AGENT", "Which function loads it?")),
        text("Answer: load_config.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    outcome = await run_agent(runtime, "find it")
    assert outcome.text == "Answer: load_config."
    server.assert_all_consumed()
    foreground, revived = server.tool_results()
    (task_id,) = set(IDS.findall(foreground))
    assert foreground == (
        f'It is in _config.py.\n\n[task_id: {task_id} — continue with task_send(to="{task_id}", '
        'message="...")]'
    )
    assert revived == f"Revived {task_id} (run epoch 2)."
    revive_request = next(
        r for r in server.requests
        if "EXPLORE-AGENT" in text_of(messages(r)[0])
        and "Which function" in text_of(messages(r)[-1])
    )  # fmt: skip
    earlier = [text_of(m) for m in messages(revive_request) if m.get("role") == "assistant"]
    assert "It is in _config.py." in earlier  # the same conversation continued
    row = TaskStore(runtime.store).get(task_id)
    assert row is not None
    assert (row["status"], row["run_epoch"], row["final_text"]) == (
        "completed",
        2,
        "load_config().",
    )
