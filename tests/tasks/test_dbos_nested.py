"""A DBOS child that spawns children of its own (``max_depth`` = 2) survives a crash: its task
tools are steps, a ``task`` call in flight at the crash finds the grandchildren it spawned
instead of spawning them again, a resumed child takes in its grandchildren still active, and
their notices go through its durable inbox, claimed once."""

from __future__ import annotations

import asyncio
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is, last, messages, text_of
from test_dbos import env, start
from tests import _wait as wait
from tests.conftest import Worker

from kernos.runtime import Runtime, Store, load_config
from kernos.tasks import TaskManager
from kernos.tasks._store import TaskStore
from kernos.testing import FakeOpenAIServer, text, tool_call

#: the grandchildren run on a model of their own (``quick``), so a worker that serves only the
#: children's model leaves them queued: the crash comes before any grandchild request is sent
CONFIG = """
default_model = "openai-chat:test"

[agents.main]
instructions = "MAIN-AGENT: you coordinate."

[agents.explore]
description = "Read-only research"
instructions = "EXPLORE-AGENT: you research."

[categories.quick]
description = "Small, fast edits"
model = "openai-chat:quick"
instructions = "QUICK-WORKER: you edit."

[tasks]
engine = "dbos"
max_depth = 2
"""
CHILD = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
         "run_in_background": True}  # fmt: skip


def grandchild(background: bool) -> dict[str, Any]:
    return {"prompt": "Count the tests.", "category": "quick", "name": "count",
            "run_in_background": background}  # fmt: skip


class Reader:
    """Reads the store the processes share: the project's SQLite file, or a PostgreSQL URL."""

    def __init__(self, project: Path, url: str | None = None) -> None:
        self.path = project / ".kernos" / "kernos.db"
        self.url = url
        self.store: Store | None = None

    def query(self, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        if self.url is None:
            try:
                with sqlite3.connect(self.path, timeout=30) as conn:
                    conn.row_factory = sqlite3.Row
                    return [dict(r) for r in conn.execute(sql, params).fetchall()]
            except sqlite3.OperationalError:  # no store (or no table) yet
                return []
        if self.store is None:
            self.store = Store(self.url)
        try:
            return [dict(r) for r in self.store.query(sql, params)]
        except Exception:  # no table yet
            return []

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def rows(reader: Reader, depth: int) -> list[dict[str, Any]]:
    return reader.query("SELECT * FROM tasks WHERE depth = ? ORDER BY id", (depth,))


def inbox(reader: Reader, task_id: str) -> list[str]:
    found = reader.query(
        "SELECT message FROM task_inbox WHERE task_id = ? ORDER BY seq", (task_id,)
    )
    return [r["message"] for r in found]


def queued(reader: Reader, project: Path, task_id: str) -> bool:
    """Whether the first run of ``task_id`` is a DBOS workflow yet (its queueing committed)."""
    if reader.url is not None:
        query = "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = ?"
        return bool(reader.query(query, (task_id,)))
    try:
        with sqlite3.connect(project / ".kernos" / "dbos.sqlite", timeout=30) as conn:
            query = "SELECT status FROM workflow_status WHERE workflow_uuid = ?"
            return bool(conn.execute(query, (task_id,)).fetchall())
    except sqlite3.OperationalError:  # DBOS has not made its tables yet
        return False


def rejoined(reader: Reader, task_id: str) -> bool:
    """Whether a replayed ``task`` call took ``task_id`` in (its ``rejoined`` event)."""
    query = "SELECT 1 FROM task_events WHERE task_id = ? AND type = 'rejoined'"
    return bool(reader.query(query, (task_id,)))


def notice_of(task_id: str) -> Any:
    """A ``when=`` / filter: the request's last message is ``task_id``'s completion notice."""

    def match(request: dict[str, Any]) -> bool:
        final = text_of(last(request))
        return "task completion" in final and f"id:{task_id}" in final

    return match


def asked(server: FakeOpenAIServer, marker: str, latest: str | None = None) -> int:
    return sum(1 for r in server.requests if agent_is(marker, latest)(r))


# -- the store: a notice claimed and put in the parent's inbox in one transaction -------------
def test_a_grandchild_notice_is_delivered_into_its_parent_s_inbox_once(store_target: str) -> None:
    store = Store(store_target)
    tasks = TaskStore(store)
    try:
        for task_id, parent, child, depth in [
            ("t_c", "s_main", "s_c", 1), ("t_g", "s_c", "s_g", 2), ("t_h", "odd", "odd_h", 2),
            ("t_x", "odd_h", "odd_x", 3),
        ]:  # fmt: skip
            tasks.insert({
                "id": task_id, "parent_session": parent, "child_session": child, "depth": depth,
                "target_kind": "agent", "target": "explore", "model": "m", "status": "running",
                "residency": "resident", "created_at": time.time(), "engine": "dbos",
            })  # fmt: skip
        # its executor and a follower deliver it at once, or a replay of one of them: one message
        outcomes = [tasks.deliver_notice("t_g", 1, "s_c", f"notice {n}") for n in range(3)]
        assert outcomes == [True, False, False]
        assert tasks.take_messages("t_c", 1, 1) == (["notice 0"], False)
        assert tasks.take_messages("t_c", 1, 1) == (["notice 0"], False)  # a replay of the take
        assert tasks.take_messages("t_c", 1, 2) == ([], False)
        # its next run has a notice of its own; a session not named after its task is found
        assert tasks.deliver_notice("t_g", 2, "s_c", "run 2")
        assert tasks.deliver_notice("t_x", 1, "odd_h", "of x")
        assert tasks.take_messages("t_h", 1, 1) == (["of x"], False)
        assert tasks.take_messages("t_c", 1, 2) == (["run 2"], False)
        # a session that is no task's: nothing claimed, so another delivery may still succeed
        assert not tasks.deliver_notice("t_c", 1, "s_main", "to the top")
        assert tasks.claim_notice("t_c", 1)
    finally:
        store.close()


# -- in one process: the notice reaches the child through its inbox ------------------------------
async def test_a_child_gets_its_grandchild_s_notice_from_its_inbox(
    project: Path, server: FakeOpenAIServer
) -> None:
    (project / "kernos.toml").write_text(CONFIG.replace("openai-chat:quick", "openai-chat:test"))
    delivered = threading.Event()
    server.script(
        tool_call("task", grandchild(True), when=agent_is("EXPLORE-AGENT", "Survey the")),
        text(
            "Waiting for the count.", when=agent_is("EXPLORE-AGENT", "Started task"), hold=delivered
        ),
        text("7 tests.", when=agent_is("QUICK-WORKER")),
        text("Survey done: 7 tests.", when=agent_is("EXPLORE-AGENT", "task completion")),
    )
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        session = runtime.session("main", record_turns=False)
        session.add_tools(manager.tools_for(session))
        (child,) = manager.spawn(session, manager.resolve(CHILD, session), background=True)
        reader = Reader(project)

        def reported() -> bool:  # the grandchild completed, its notice in the child's inbox
            done = [g for g in manager.records.values() if g.depth == 2 and g.status == "completed"]
            return bool(done and inbox(reader, child.id))

        await wait.until(reported, f"the grandchild to report: {server}", 60)
        delivered.set()
        assert await manager.wait([child], timeout=60)
        assert child.status == "completed" and child.final_text == "Survey done: 7 tests."
        (count,) = [g for g in manager.records.values() if g.depth == 2]
        assert count.parent is child.session and count.name == "count"
        assert len(inbox(reader, child.id)) == 1
        assert asked(server, "EXPLORE-AGENT", f"id:{count.id}") == 1
        assert child.session is not None and child.session.take_queued() is None
        # its own child: the tool result of its task call, recorded as a step
        notices = session.take_queued()
        assert notices is not None and notices.count("task completion") == 1
    finally:
        delivered.set()
        await manager.aclose(wait=True)
        runtime.close()


async def test_a_child_s_task_send_is_keyed_by_its_step_and_stored_once_on_a_replay(
    project: Path, server: FakeOpenAIServer
) -> None:
    """The child's ``task_send`` to its running grandchild is a DBOS step: its message is in the
    inbox under the key of that step (workflow id and step id, what a resumed run replays the
    step under), and the same send again under that key, as a run resumed after a crash
    between the commit and the step's record makes it, stores nothing: the grandchild reads the
    message once."""
    from dbos import DBOS

    from kernos.tasks._dbos import workflow_id

    (project / "kernos.toml").write_text(CONFIG.replace("openai-chat:quick", "openai-chat:test"))
    grand_asked, checked, delivered = threading.Event(), threading.Event(), threading.Event()
    follow_up = "Also count the docs."
    server.script(
        tool_call("task", grandchild(True), when=agent_is("EXPLORE-AGENT", "Survey the")),
        tool_call(
            "task_send",
            {"to": "count", "message": follow_up},
            when=agent_is("EXPLORE-AGENT", "Started task"),
            hold=grand_asked,
        ),
        text("Survey done.", when=agent_is("EXPLORE-AGENT", "task completion")),
        text("Waiting for the count.", when=agent_is("EXPLORE-AGENT"), hold=delivered),
        text("7 tests.", when=agent_is("QUICK-WORKER", "Count the tests."), hold=checked),
        text("7 tests, 2 docs.", when=agent_is("QUICK-WORKER", follow_up)),
    )
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    reader = Reader(project)
    other = TaskStore(Store(project / ".kernos" / "kernos.db"))
    try:
        session = runtime.session("main", record_turns=False)
        session.add_tools(manager.tools_for(session))
        (child,) = manager.spawn(session, manager.resolve(CHILD, session), background=True)
        # the grandchild runs: its first prompt waits
        await wait.until(lambda: asked(server, "QUICK-WORKER"), "the grandchild to ask", 60)
        grand_asked.set()
        (count,) = [g for g in manager.records.values() if g.depth == 2]
        query = "SELECT * FROM task_inbox WHERE task_id = ?"
        sent = await wait.until(lambda: reader.query(query, (count.id,)), f"the message: {server}")
        ((message,),) = [(r["message"],) for r in sent]
        assert message == follow_up
        key = sent[0]["send_key"]
        assert key is not None, "a send of a durable run carries its step's key"
        wf_id, step = key.rsplit(":", 1)
        assert wf_id == workflow_id(child.id, 1)

        async def step_names() -> dict[int, str] | None:
            steps = await DBOS.list_workflow_steps_async(wf_id, load_output=False)
            names = {s["function_id"]: s["function_name"] for s in steps}
            return names if int(step) in names else None

        # DBOS records the step after the commit
        names = await wait.until(step_names, f"DBOS to record step {step} of {wf_id}")
        assert names[int(step)] == "tool:task_send"
        # the resumed run's send of that step: nothing new, the same answer
        assert other.send(count.id, follow_up, key) == 1
        assert len(inbox(reader, count.id)) == 1
        checked.set()
        reported = lambda: count.status == "completed" and inbox(reader, child.id)  # noqa: E731
        await wait.until(reported, f"the grandchild to report: {server}")
        delivered.set()
        assert await manager.wait([child], timeout=60)
        assert child.status == "completed" and count.final_text == "7 tests, 2 docs."
        (second,) = [r for r in server.requests if agent_is("QUICK-WORKER", follow_up)(r)]
        assert text_of(last(second)).count(follow_up) == 1
        assert asked(server, "QUICK-WORKER") == 2
    finally:
        grand_asked.set()
        checked.set()
        delivered.set()
        other.store.close()
        reader.close()
        await manager.aclose(wait=True)
        runtime.close()


async def test_a_child_s_task_call_answers_once_its_grandchild_is_queued(
    project: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the call's step is recorded once it answers, and a replay does not spawn again: had the
    # grandchild's workflow not been queued by then, a crash of the child's executor would
    # leave it with no run (the reaper ends it lost)
    from kernos.tasks._dbos import DBOSEngine

    (project / "kernos.toml").write_text(CONFIG.replace("openai-chat:quick", "openai-chat:test"))
    gate = asyncio.Event()
    ready = DBOSEngine.ready

    async def slow_queue(self: DBOSEngine, model: Any = None, enqueue: Any = None) -> None:
        if enqueue is not None and enqueue[1].depth == 2:
            await gate.wait()  # the grandchild's queueing is held
        await ready(self, model, enqueue)

    monkeypatch.setattr(DBOSEngine, "ready", slow_queue)
    server.script(
        tool_call("task", grandchild(True), when=agent_is("EXPLORE-AGENT", "Survey the")),
        text("Waiting for the count.", when=agent_is("EXPLORE-AGENT", "Started task")),
        text("7 tests.", when=agent_is("QUICK-WORKER")),
    )
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        session = runtime.session("main", record_turns=False)
        session.add_tools(manager.tools_for(session))
        (child,) = manager.spawn(session, manager.resolve(CHILD, session), background=True)
        spawned = lambda: [g for g in manager.records.values() if g.depth == 2]  # noqa: E731
        await wait.until(spawned, "the grandchild to be spawned", 60)
        # a "nothing happens" check, ordering no events: time for the call to answer, were it
        # not waiting for the grandchild's queueing (held), which no event would show
        await asyncio.sleep(1.0)
        assert asked(server, "EXPLORE-AGENT", "Started task") == 0
        gate.set()
        assert await manager.wait([child], timeout=60)
        assert child.status == "completed", child.error
        assert asked(server, "EXPLORE-AGENT", "Started task") == 1
        (count,) = [g for g in manager.records.values() if g.depth == 2]
        assert await manager.wait([count], timeout=60) and count.status == "completed"
    finally:
        gate.set()
        await manager.aclose(wait=True)
        runtime.close()


# -- kill -9 of the worker running the child: real processes ------------------------------------
def kill_the_child_s_worker(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[subprocess.Popen[str]],
    worker: Callable[..., Worker],
    reader: Reader,
    *,
    background: bool,
    stop: signal.Signals = signal.SIGKILL,
    split: bool = False,
) -> tuple[subprocess.Popen[str], dict[str, Any], dict[str, Any]]:
    """``kernos run`` (executing nothing) spawns a background child; a worker serving only the
    child's model runs it; the child spawns a grandchild (on the other model: it stays queued);
    the worker is killed with ``-9`` (the child's next request in flight, or its foreground
    ``task`` call waiting), or stopped (``stop``: SIGTERM, it leaves); a second worker serving
    every model resumes the child and runs the grandchild (``split``: two workers, one per
    model: the resumed child follows its grandchild in another process). Returns the run
    (finished) and the child's and the grandchild's rows."""
    (project / "kernos.toml").write_text(
        CONFIG + 'run_executes = false\non_crash = "resume"\nheartbeat = 0.5\n', "utf-8"
    )
    released, counted = threading.Event(), threading.Event()
    script = [
        tool_call("task", CHILD, when=agent_is("MAIN-AGENT", "survey it")),
        text("Waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        tool_call("task", grandchild(background), when=agent_is("EXPLORE-AGENT", "Survey the")),
        # foreground: answered once the resumed child's task call runs again, so it finds its
        # grandchild active and waits for it (background: at once)
        text("7 tests.", when=agent_is("QUICK-WORKER"), hold=None if background else counted),
        text("All done.", when=agent_is("MAIN-AGENT", "task completion")),
    ]
    if background:
        script += [
            # in flight at the kill, asked again by the resumed child; answered once the
            # grandchild's notice is in the child's inbox: the child looks its child up by name
            tool_call(
                "task_output",
                {"name": "count"},
                when=agent_is("EXPLORE-AGENT", "Started task"),
                hold=released,
                repeat=True,
            ),
            text("Waiting for the count.", when=agent_is("EXPLORE-AGENT", "name: count")),
            text("Survey done: 7 tests.", when=agent_is("EXPLORE-AGENT", "task completion")),
        ]
    else:  # the task call's answer: the grandchild's result
        script.append(text("Survey done: 7 tests.", when=agent_is("EXPLORE-AGENT", "7 tests.")))
    server.script(*script)
    first = worker(project, env(project, server), "--models", "openai-chat:test")
    run = start(project, server, "run", "survey it", "-q")
    procs.append(run)
    try:
        (count,) = wait.wait_for(lambda: rows(reader, 2), "the grandchild's row")
        if background:
            wait.wait_for(
                lambda: asked(server, "EXPLORE", "Started task"), "the child's next request"
            )
        else:
            # the task call waits for the grandchild once its workflow is queued
            wait.wait_for(lambda: queued(reader, project, count["id"]), "the grandchild queued")
        first.stop(stop, timeout=30)
        (child,) = rows(reader, 1)
        assert child["status"] == "running" and count["parent_session"] == child["child_session"]
        second = worker(project, env(project, server), *(["--models", "openai-chat:test"] * split))
        if split:
            worker(project, env(project, server), "--models", "openai-chat:quick")
        if background:
            wait.wait_for(lambda: inbox(reader, child["id"]), "the notice in the child's inbox")
            released.set()
        else:
            taken = f"{socket.gethostname()}:{second.pid}"
            wait.wait_for(lambda: rows(reader, 1)[0]["executor"] == taken, "the child resumed")
            # its replay reaches the task call, which takes in the grandchild (still active)
            wait.wait_for(lambda: rejoined(reader, count["id"]), "the replayed task call")
            counted.set()
        out, errors = run.communicate(timeout=120)
    finally:
        released.set()
        counted.set()
    assert run.returncode == 0, errors
    assert out == "All done.\n"
    (child,) = rows(reader, 1)
    (count,) = rows(reader, 2)  # spawned once
    return run, child, count


@pytest.mark.slow
@pytest.mark.parametrize(
    ("background", "stop", "split"),
    [
        (True, signal.SIGKILL, False),
        pytest.param(True, signal.SIGKILL, False, marks=pytest.mark.postgres),
        (True, signal.SIGKILL, True),
        (False, signal.SIGKILL, False),
        (False, signal.SIGKILL, True),
        (False, signal.SIGTERM, False),
    ],
    ids=[
        "background",
        "background-postgres",
        "background-grandchild-elsewhere",
        "foreground",
        "foreground-grandchild-elsewhere",
        "foreground-worker-leaves",
    ],
)
def test_a_child_resumed_after_kill_9_does_not_spawn_its_grandchild_again(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[subprocess.Popen[str]],
    background: bool,
    stop: signal.Signals,
    split: bool,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    worker: Callable[..., Worker],
) -> None:
    """With SIGTERM the worker leaves: the child stops to be resumed elsewhere, and its queued
    grandchild is left queued for it (not cancelled with the child's turn). The background case
    runs on PostgreSQL too."""
    url = None
    if request.node.callspec.id.endswith("postgres"):
        url = request.getfixturevalue("fresh_postgres_url")
        monkeypatch.setenv("KERNOS_STORE_URL", url)
    reader = Reader(project, url)
    try:
        _, child, count = kill_the_child_s_worker(
            project, server, procs, worker, reader, background=background, stop=stop, split=split
        )
        check_one_grandchild_and_one_notice_each(server, reader, background, child, count)
    finally:
        reader.close()


def check_one_grandchild_and_one_notice_each(
    server: FakeOpenAIServer,
    reader: Reader,
    background: bool,
    child: dict[str, Any],
    count: dict[str, Any],
) -> None:
    assert child["status"] == "completed", child["error"]
    assert child["final_text"] == "Survey done: 7 tests."
    assert count["status"] == "completed", count["error"]
    assert count["final_text"] == "7 tests."
    assert asked(server, "QUICK-WORKER") == 1  # one grandchild, asked once
    # the child asked for the survey once (its first step replayed), and heard of the count once
    assert asked(server, "EXPLORE-AGENT", "Survey the repository.") == 1
    if background:
        assert inbox(reader, child["id"]) == [inbox(reader, child["id"])[0]]
        assert f"id:{count['id']}" in inbox(reader, child["id"])[0]
        assert sum(1 for r in server.requests if notice_of(count["id"])(r)) == 1
    else:
        assert asked(server, "EXPLORE-AGENT", "7 tests.") == 1
        assert inbox(reader, child["id"]) == []
    # the top parent heard of the child once
    assert sum(1 for r in server.requests if notice_of(child["id"])(r)) == 1
    mains = [r for r in server.requests if agent_is("MAIN-AGENT")(r)]
    assert sum(text_of(m).count(f"id:{child['id']}") for m in messages(mains[-1])) == 1
