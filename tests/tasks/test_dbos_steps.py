"""A DBOS child's tool calls are steps: a resumed child gets each completed call's
recorded result back and never repeats its side effect; only the in-flight step runs again."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from tasks_helpers import agent_is, last, text_of
from test_dbos import env, row, start, use_dbos
from tests import _wait as wait
from tests.conftest import Worker

from kernos.boundary import ToolContext, ToolError, ToolResult, ToolSpec, call_tool
from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager
from kernos.tasks._steps import ToolRecord, stepped, tool_record, tool_result, unwrapped
from kernos.testing import FakeOpenAIServer, text, tool_call, tool_calls

CONFIG = """
default_model = "openai-chat:test"

[tools.append_line]
function = "steps_probe:append_line"

[agents.main]
instructions = "MAIN-AGENT: you coordinate."
tools = ["append_line"]

[agents.explore]
description = "Read-only research"
instructions = "EXPLORE-AGENT: you research."

[tasks]
engine = "dbos"
"""
PROBE = '''
from pathlib import Path


def append_line(line: str) -> str:
    """Append one line to the project's side-effects file.

    Args:
        line: the text to append.
    """
    with (Path(__file__).parent / "side_effects.txt").open("a", encoding="utf-8") as out:
        out.write(line + "\\n")
    return f"appended {line}"
'''


class Count(BaseModel):
    n: int


def counting_tool(
    name: str,
    ran: list[str],
    *,
    after: asyncio.Event | None = None,
    done: asyncio.Event | None = None,
) -> ToolSpec[Count]:
    """A tool that notes each execution in ``ran``; ``n < 0`` is a semantic rejection. Its check
    waits for ``after`` (a sibling call's execution); its execution sets ``done``."""

    async def validate(params: Count, ctx: ToolContext) -> ToolError | None:
        if after is not None:
            await asyncio.wait_for(after.wait(), timeout=60)
        return ToolError("negative", "n must be 0 or more") if params.n < 0 else None

    async def execute(params: Count, ctx: ToolContext) -> ToolResult:
        ran.append(name)
        if done is not None:
            done.set()
        if params.n == 13:
            raise RuntimeError("unlucky")
        return ToolResult(f"{name} {params.n}", details={"n": params.n})

    return ToolSpec(name, f"Counts ({name}).", Count, execute, validate=validate)


class Recorder:
    """A durable run in memory: records each step's result, then replays them in order."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, ToolRecord]] = []
        self.replaying = False
        self.position = 0

    async def __call__(self, name: str, call: Any) -> ToolRecord:
        if self.replaying:
            recorded_name, record = self.steps[self.position]
            assert recorded_name == name
            self.position += 1
            return record
        record = await call()
        json.dumps(record)  # what the system database stores: plain JSON
        self.steps.append((name, record))
        return record


# -- the wrapper, without I/O ----------------------------------------------------------------
@pytest.mark.parametrize(
    "raw",
    ['{"n": 1}', {"n": 2}, '{"n": ', '{"n": "x"}', '{"n": -1}', '{"n": 13}', "", "[1]"],
    ids=["json", "dict", "bad-json", "schema", "semantic", "raises", "empty", "list"],
)
async def test_a_stepped_tool_answers_as_the_tool_does_and_a_replay_does_not_run_it(
    raw: Any,
) -> None:
    ran: list[str] = []
    plain = counting_tool("count", ran)
    recorder = Recorder()
    durable = stepped(plain, recorder)
    assert (durable.name, durable.description, durable.schema()) == (
        plain.name, plain.description, plain.schema(),
    )  # fmt: skip
    expected = await call_tool(plain, raw)
    executions = len(ran)
    first = await call_tool(durable, raw)
    assert (first.text, first.details, first.is_error) == (
        expected.text, expected.details, expected.is_error,
    )  # fmt: skip
    assert first.stage == expected.stage  # a schema error is still a retry for the model
    assert len(ran) == 2 * executions  # the first run executes (when the call gets that far)
    recorder.replaying = True
    replayed = await call_tool(durable, raw)
    assert replayed == first
    assert len(ran) == 2 * executions  # the replay did not execute it again


scalars = st.none() | st.booleans() | st.integers(-20, 20) | st.text(max_size=8)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(raw=json_values | st.builds(lambda n: {"n": n}, json_values) | st.text(max_size=12))
async def test_any_input_gets_the_plain_tool_s_answer_from_the_stepped_one(raw: Any) -> None:
    plain = counting_tool("count", [])
    expected = await call_tool(plain, raw)
    got = await call_tool(stepped(plain, Recorder()), raw)
    assert (got.text, got.details, got.is_error) == (
        expected.text, expected.details, expected.is_error,
    )  # fmt: skip


def test_a_stepped_tool_wraps_the_plain_one_once() -> None:
    plain = counting_tool("count", [])
    twice = stepped(stepped(plain, Recorder()), Recorder())
    assert unwrapped(twice) is plain and unwrapped(plain) is plain


def test_a_record_is_plain_json_scrubbed_and_survives_odd_details() -> None:
    odd = ToolResult("ok", details={"at": object(), "ids": (1, 2), "nan": float("nan")})
    record = tool_record(odd)
    assert json.loads(json.dumps(record)) == record
    assert record["details"]["ids"] == [1, 2] and isinstance(record["details"]["at"], str)
    assert tool_result(record).text == "ok"


async def test_the_recorded_result_holds_no_secret() -> None:
    key = "sk-" + "a1b2c3d4e5" * 4

    async def leak(params: Count, ctx: ToolContext) -> str:
        return f"the key is {key}"

    recorder = Recorder()
    result = await call_tool(stepped(ToolSpec("leak", "Leaks.", Count, leak), recorder), {"n": 1})
    assert key not in json.dumps(recorder.steps) and key not in result.text


@pytest.mark.parametrize("record", [None, "text", {"details": {}}, {"text": 3}])
def test_an_unreadable_record_is_an_error_result_not_a_crash(record: Any) -> None:
    result = tool_result(record)
    assert result.is_error and result.code == "step_record_unreadable"
    assert "call the tool again" in result.text


# -- in one process, on real DBOS --------------------------------------------------------------
def spawn_with(manager: TaskManager, runtime: Runtime, tools: list[ToolSpec[Any]]) -> Any:
    session = runtime.session("main", record_turns=False)
    session.add_tools(tools)
    session.add_tools(manager.tools_for(session))
    names = [t.name for t in tools]
    call = {"prompt": "Survey.", "subagent_type": "explore", "tools": names}
    (record,) = manager.spawn(session, manager.resolve(call, session), background=True)
    return session, record


async def test_parallel_tool_calls_are_steps_in_the_model_s_call_order(
    project: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call's check waits until the second call has executed; the step ids still
    follow the order the model called them in (what a replay matches results by)."""
    from dbos import DBOS

    monkeypatch.delenv("KERNOS_TASK_ENGINE", raising=False)
    use_dbos(project)
    ran: list[str] = []
    fast_ran = asyncio.Event()
    tools = [counting_tool("slow", ran, after=fast_ran), counting_tool("fast", ran, done=fast_ran)]
    child = agent_is("EXPLORE-AGENT", "Survey.")
    server.script(
        tool_calls(("slow", {"n": 1}), ("fast", {"n": 2}), when=child),
        text("both counted", when=agent_is("EXPLORE-AGENT", role="tool")),
    )
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        assert manager.engine.name == "dbos"
        _, record = spawn_with(manager, runtime, tools)
        await manager.wait([record])
        assert record.status == "completed" and record.final_text == "both counted"
        assert ran == ["fast", "slow"]  # really in parallel
        await manager.engine._recorded([record.id])  # type: ignore[attr-defined]
        steps = sorted(
            await DBOS.list_workflow_steps_async(record.id), key=lambda s: s["function_id"]
        )
        assert [s["function_name"] for s in steps] == [
            "model_request", "tool:slow", "tool:fast", "model_request",
        ]  # fmt: skip
        assert [s["output"]["text"] for s in steps[1:3]] == ["slow 1", "fast 2"]
        tool_texts = server.tool_results()
        assert "slow 1" in tool_texts and "fast 2" in tool_texts
    finally:
        await manager.aclose(wait=True)
        runtime.close()


async def test_the_local_engine_gives_a_child_the_parent_s_tools_unchanged(
    project: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNOS_TASK_ENGINE", "local")
    server.script(text("done", when=agent_is("EXPLORE-AGENT")))
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        plain = counting_tool("count", [])
        _, record = spawn_with(manager, runtime, [plain])
        assert record.session.tools["count"] is plain
        await manager.wait([record])
    finally:
        await manager.aclose(wait=True)
        runtime.close()


# -- kill -9 of a worker, real processes -------------------------------------------------------
def transcript_and_turns(project: Path, task: dict[str, Any]) -> tuple[list[tuple[str, str]], Any]:
    """The task's transcript events as ``(type, text)`` and its child session's stored turns."""
    with sqlite3.connect(project / ".kernos" / "kernos.db") as db:
        db.row_factory = sqlite3.Row
        events = db.execute(
            "SELECT type, payload FROM task_events WHERE task_id = ? AND type IN "
            "('message', 'tool_call', 'tool_result') ORDER BY seq",
            (task["id"],),
        ).fetchall()
        turns = db.execute(
            "SELECT role, text, tool_calls, tool_results FROM turns WHERE session_id = ? "
            "ORDER BY id",
            (task["child_session"],),
        ).fetchall()
    shown = []
    for event in events:
        payload = json.loads(event["payload"])
        shown.append((event["type"], str(payload.get("text") or payload.get("name"))))
    rows = [
        {**dict(t), "tool_calls": json.loads(t["tool_calls"]),
         "tool_results": json.loads(t["tool_results"])}
        for t in turns
    ]  # fmt: skip
    return shown, rows


@pytest.mark.slow
def test_kill_9_mid_child_resumes_elsewhere_without_running_a_completed_tool_call_again(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[Any],
    worker: Callable[..., Worker],
) -> None:
    """The child's first request calls a tool that appends a line to a file; its second request
    hangs; its worker is killed; another worker resumes it: the line is there once."""
    (project / "kernos.toml").write_text(
        CONFIG + 'run_executes = false\non_crash = "resume"\nheartbeat = 0.5\n', "utf-8"
    )
    (project / "steps_probe.py").write_text(PROBE, "utf-8")
    effects = project / "side_effects.txt"
    gate = threading.Event()

    def second_request(request: dict[str, Any]) -> bool:
        return agent_is("EXPLORE-AGENT")(request) and last(request).get("role") == "tool"

    spawn = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
             "run_in_background": True, "tools": ["append_line"]}  # fmt: skip
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        # step 1: the model asks for the side effect; step 2: it runs, once
        tool_call(
            "append_line",
            {"line": "sent once"},
            when=agent_is("EXPLORE-AGENT", "Survey the repository."),
        ),
        # step 3, in flight when the worker dies
        text("The survey found 3 modules.", when=second_request, hold=gate, repeat=True),
        text("Survey: 3 modules.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    first = worker(project, env(project, server))
    run = start(project, server, "run", "survey it", "-q")
    procs.append(run)
    second = lambda: any(second_request(r) for r in server.requests)  # noqa: E731
    wait.wait_for(second, "the child's second request")
    assert effects.read_text("utf-8") == "sent once\n"  # the tool ran on `first`
    first.kill()
    second = worker(project, env(project, server))
    gate.set()
    out, errors = run.communicate(timeout=120)
    assert run.returncode == 0, errors
    assert out == "Survey: 3 modules.\n"
    task = row(project, "completed")
    assert task is not None and task["executor"] == f"{socket.gethostname()}:{second.pid}"
    assert effects.read_text("utf-8") == "sent once\n"  # not run again by `second`
    firsts = [
        r for r in server.requests
        if agent_is("EXPLORE-AGENT")(r) and "Survey the repository." in text_of(last(r))
    ]  # fmt: skip
    assert len(firsts) == 1  # the completed model step was replayed from its record
    resent = [r for r in server.requests if second_request(r)]
    assert len(resent) == 2  # the in-flight request again, with the recorded tool result
    assert all("appended sent once" in text_of(last(r)) for r in resent)
    # the transcript shows the replayed part once: `first` wrote the first message, the tool
    # call and its result; `second` replayed them and wrote only what came after
    events, turns = transcript_and_turns(project, task)
    assert [kind for kind, _ in events] == ["message", "tool_call", "tool_result", "message"]
    assert events[2] == ("tool_result", "appended sent once")
    assert events[3] == ("message", "The survey found 3 modules.")
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant"]
