"""A resumed DBOS child writes its transcript and its turns once; a follower ends a child whose
workflow no executor will ever run ``lost``, once."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is, last, text_of
from test_dbos import env, start, use_dbos, wait_row
from test_dbos_steps import CONFIG, PROBE, transcript_and_turns
from tests import _wait as wait
from tests.conftest import Worker

from kernos.runtime import Runtime, Store, history_from_turns, load_config
from kernos.runtime._store._store import _RUNTIME_MIGRATIONS
from kernos.tasks import TaskManager
from kernos.tasks._children import earlier_runs
from kernos.tasks._store import MIGRATIONS, TaskStore
from kernos.testing import FakeOpenAIServer, text, tool_call


# -- keys: pure store behaviour, both databases ----------------------------------------------
def test_a_keyed_event_or_turn_is_stored_once_and_unkeyed_ones_always(store_target: str) -> None:
    store = Store(store_target)
    tasks = TaskStore(store)
    try:
        for key in ["1:1", "1:2", "1:1", None, None, "1:2", "2:1"]:
            tasks.event("t_1", "message", {"key": key}, key=key)
            store.record_turn("s_1", "explore", "user", f"turn {key}", key=key)
        tasks.event("t_2", "message", {"key": "1:1"}, key="1:1")  # keys are per task
        events = tasks.events("t_1")
        assert [e["payload"]["key"] for e in events] == ["1:1", "1:2", None, None, "2:1"]
        assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]  # no gap where one was ignored
        assert [t["text"] for t in store.turns("s_1")] == [
            "turn 1:1", "turn 1:2", "turn None", "turn None", "turn 2:1",
        ]  # fmt: skip
        assert len(tasks.events("t_2")) == 1
    finally:
        store.close()


def test_the_key_migrations_apply_to_an_existing_store_file(tmp_path: Path) -> None:
    """A store file of the previous version (runtime 1-2, tasks 1-4) with turns and events in
    it: opening it adds the keys, keeps what is there, and keyed writes are kept once."""
    path = tmp_path / "kernos.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE schema_migrations (namespace TEXT NOT NULL, version INTEGER NOT NULL,"
            " name TEXT NOT NULL, applied_at REAL NOT NULL, PRIMARY KEY (namespace, version))"
        )
        for namespace, migrations in (
            ("runtime", _RUNTIME_MIGRATIONS[:2]),
            ("tasks", MIGRATIONS[:4]),
        ):
            for version, name, sql in migrations:
                db.executescript(sql)
                db.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, ?, 0)", (namespace, version, name)
                )
        db.execute("INSERT INTO turns (session_id, agent, role, text, created_at) "
                   "VALUES ('s_1', 'explore', 'user', 'before', 0)")  # fmt: skip
        db.execute("INSERT INTO task_events (task_id, seq, type, payload, created_at) "
                   "VALUES ('t_1', 1, 'message', '{}', 0)")  # fmt: skip
    store = Store(path)
    tasks = TaskStore(store)
    try:
        assert store.versions("runtime") == [1, 2, 3]
        assert store.versions("tasks") == [1, 2, 3, 4, 5, 6, 7, 8, 9]
        for _ in range(2):
            tasks.event("t_1", "message", {}, key="1:1")
            store.record_turn("s_1", "explore", "user", "again", key="1:1")
        assert [e["seq"] for e in tasks.events("t_1")] == [1, 2]
        assert [t["text"] for t in store.turns("s_1")] == ["before", "again"]
    finally:
        store.close()


# -- a resumed run's turns, real processes -----------------------------------------------------
@pytest.mark.slow
def test_a_run_killed_in_its_second_prompt_resumes_without_doubling_the_child_s_history(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[Any],
    worker: Callable[..., Worker],
) -> None:
    """``kernos run`` runs its own child; the parent's ``task_send`` gives the child a second
    prompt; the run is killed while that prompt's request is in flight; a worker resumes the
    child and replays its first prompt, whose turns and events the dead run had stored, then
    takes the follow-up again from the store (it was only in the dead run's memory before)."""
    (project / "kernos.toml").write_text(CONFIG + 'on_crash = "resume"\nheartbeat = 0.5\n', "utf-8")
    (project / "steps_probe.py").write_text(PROBE, "utf-8")
    first_answer, second_request = threading.Event(), threading.Event()
    spawn = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
             "run_in_background": True}  # fmt: skip
    follow_up = {"to": "survey", "message": "Also count the tests."}
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "survey it")),
        tool_call("task_send", follow_up, when=agent_is("MAIN-AGENT", "Started task")),
        text("Waiting.", when=agent_is("MAIN-AGENT", "Delivered to")),
        # the child's first prompt answers once the follow-up is queued for it
        text(
            "The survey found 3 modules.",
            when=agent_is("EXPLORE-AGENT", "Survey the"),
            hold=first_answer,
        ),
        # its second prompt, in flight when the run dies; the resumed run takes the same
        # message from the store's inbox and asks it again
        text(
            "12 tests.",
            when=agent_is("EXPLORE-AGENT", "Also count"),
            hold=second_request,
            repeat=True,
        ),
    )
    run = start(project, server, "run", "survey it", "-q")
    procs.append(run)
    try:
        asked = lambda *match: any(agent_is(*match)(r) for r in server.requests)  # noqa: E731
        wait.wait_for(
            lambda: asked("MAIN-AGENT", "Delivered to"), "the follow-up delivered", alive=[run]
        )
        first_answer.set()
        wait.wait_for(
            lambda: asked("EXPLORE-AGENT", "Also count"), "the child's second prompt", alive=[run]
        )
        run.send_signal(signal.SIGKILL)
        run.communicate(timeout=30)
    finally:
        second_request.set()
    worker(project, env(project, server))
    task = wait_row(project, "completed")
    assert task["final_text"] == "12 tests."  # the follow-up survived the crash
    events, turns = transcript_and_turns(project, task)
    # the dead run stored the first prompt's turns and the follow-up's question; the resumed run's
    # replay did not add them again
    assert [(t["role"], t["text"]) for t in turns] == [
        ("user", turns[0]["text"]), ("assistant", "The survey found 3 modules."),
        ("user", "Also count the tests."), ("assistant", "12 tests."),
    ]  # fmt: skip
    assert "Survey the repository." in turns[0]["text"]
    history = history_from_turns(turns)  # what task_send would continue the child from
    assert len(history) == 4
    firsts = [e for e in events if e[0] == "message" and "Survey the repository." in e[1]]
    assert len(firsts) == 1
    assert events.count(("message", "The survey found 3 modules.")) == 1
    assert events.count(("message", "Also count the tests.")) == 1
    asked = [r for r in server.requests if agent_is("EXPLORE-AGENT", "Survey the")(r)]
    assert len(asked) == 1 and "Survey the" in text_of(last(asked[0]))  # replayed, not re-sent


# -- a child no executor will run: the follower's guard, real DBOS -----------------------------
async def queued_child(project: Path) -> tuple[Runtime, TaskManager, Any, Any]:
    """A run that does not execute children (no worker runs either): one background child,
    queued in DBOS (``ENQUEUED``) and active in the store."""
    from dbos import DBOS

    use_dbos(project, run_executes="false")
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    session = runtime.session("main", record_turns=False)
    session.add_tools(manager.tools_for(session))
    call = {"prompt": "Survey.", "subagent_type": "explore"}
    (record,) = manager.spawn(session, manager.resolve(call, session), background=True)
    engine: Any = manager.engine

    async def queued() -> Any:
        return await DBOS.get_workflow_status_async(record.id) if engine._launched else None

    status = await wait.until(queued, "the child to be queued", 60)
    assert status.status == "ENQUEUED"
    return runtime, manager, session, record


@pytest.fixture
def quick_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernos.tasks._dbos import _follow  # where the follower reads them

    monkeypatch.setattr(_follow, "ORPHAN_CHECK_SECONDS", 0.1)
    monkeypatch.setattr(_follow, "ORPHAN_GRACE_SECONDS", 0.5)


@pytest.mark.parametrize("how", ["cancelled", "deleted"])
async def test_a_child_whose_workflow_ended_or_vanished_is_lost_once_with_one_notice(
    project: Path, server: FakeOpenAIServer, quick_guard: None, how: str
) -> None:
    from dbos import DBOS

    runtime, manager, session, record = await queued_child(project)
    try:
        if how == "cancelled":  # ended in DBOS, the row not updated
            await DBOS.cancel_workflow_async(record.id)
        else:  # gone from DBOS
            await DBOS.delete_workflows_async([record.id])
        assert await manager.wait([record], timeout=60), "the follower never ended the child"
        assert record.status == "lost"
        row = manager.store.get(record.id)
        assert row is not None and row["status"] == "lost"
        said = "ended (CANCELLED)" if how == "cancelled" else "does not exist"
        assert said in row["error"] and "start it again with the task tool" in row["error"]
        assert record.error == row["error"]

        def lost_events() -> int:
            return sum(
                1 for e in manager.store.events(record.id) if e["payload"].get("to") == "lost"
            )

        assert lost_events() == 1
        # a "nothing more happens" check, ordering no events: more follower passes, nothing
        # ended or noticed twice (its orphan_checks counts only passes with a child waited on,
        # and none is once this one ended: no counter to wait for)
        await asyncio.sleep(0.5)
        notices = session.take_queued()
        assert notices is not None and notices.count("task completion") == 1
        assert f"id:{record.id} status:lost" in notices and said in notices
        assert session.take_queued() is None
        assert lost_events() == 1
    finally:
        manager.cancel(record, "test over")  # still active when the guard did not end it
        await manager.aclose(wait=True)
        runtime.close()


async def test_a_child_queued_for_long_is_left_alone(
    project: Path, server: FakeOpenAIServer, quick_guard: None
) -> None:
    """No worker serves its queue: it stays queued (``ENQUEUED``) however many checks pass."""
    runtime, manager, session, record = await queued_child(project)
    engine: Any = manager.engine
    try:
        seen = engine.orphan_checks
        # ten checks, over twice the grace
        await wait.until(lambda: engine.orphan_checks >= seen + 10, "ten checks of the workflow")
        assert record.status == "running"
        row = manager.store.get(record.id)
        assert row is not None and row["status"] == "running" and row["error"] is None
        assert session.take_queued() is None
    finally:
        manager.cancel(record, "test over")
        await manager.aclose(wait=True)
        runtime.close()


# -- a revival run elsewhere continues the child's conversation --------------------------------
def test_earlier_runs_keeps_the_turns_of_runs_before_this_one() -> None:
    turns = [{"run_key": k, "text": str(k)} for k in (None, "1:1", "1:2", "2:1", "3:1", "x:1")]
    assert [t["text"] for t in earlier_runs(turns, 2)] == ["None", "1:1", "1:2", "x:1"]
    assert [t["text"] for t in earlier_runs(turns, 1)] == ["None", "x:1"]


async def test_a_child_rebuilt_for_a_revival_has_the_conversation_of_its_earlier_runs(
    project: Path, server: FakeOpenAIServer
) -> None:
    """What a worker runs a revived child (run 2) from: its stored turns of run 1, not a blank
    conversation, and not the turns an earlier attempt of run 2 stored (the run replays them)."""
    use_dbos(project)
    server.script(text("the survey", when=agent_is("EXPLORE-AGENT")))
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        session = runtime.session("main", record_turns=False)
        session.add_tools(manager.tools_for(session))
        call = {"prompt": "Survey.", "subagent_type": "explore"}
        (record,) = manager.spawn(session, manager.resolve(call, session), background=True)
        await manager.wait([record])
        assert record.status == "completed"
        row = manager.store.get(record.id)
        assert row is not None
        sid = row["child_session"]
        runtime.store.record_turn(sid, "explore", "user", "half of run 2", key="2:1")
        rebuilt = manager.rebuild(row, 2)
        assert rebuilt.session is not None
        assert [type(m).__name__ for m in rebuilt.session.history] == [
            "ModelRequest", "ModelResponse",
        ]  # fmt: skip
        assert "half of run 2" not in str(rebuilt.session.history)
        assert manager.rebuild(row, 1).session.history == []  # a first run starts blank
    finally:
        await manager.aclose(wait=True)
        runtime.close()


# -- the keys of a replayed run's tool events, without DBOS ---------------------------------------
def test_a_replay_whose_tool_results_come_back_in_another_order_keeps_each_once(
    project: Path, server: FakeOpenAIServer
) -> None:
    """The dead run wrote both calls and the result of ``b``, then died while ``a`` ran; on the
    replay ``a``, run again, answers before ``b``'s recorded result is returned: each result is
    in the transcript once (by ordinal, ``a``'s would take ``b``'s place and be dropped)."""
    from kernos.boundary import ToolResult
    from kernos.runtime import SessionEvent
    from kernos.tasks._record import TaskRecord
    from kernos.tasks._resolve import SpawnItem
    from kernos.tasks._transcript import record_event

    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        parent = runtime.session("main", record_turns=False)
        record = TaskRecord("t_0000beef", parent, SpawnItem("Survey."), "openai-chat:test", 1, True)

        def emit(kind: str, **data: Any) -> None:
            record_event(manager.store, record, SessionEvent("s_child", "explore", kind, data))

        def call(name: str) -> None:
            emit("tool_call", name=name, args={}, call_id=f"call_{name}")

        def result(name: str) -> None:
            emit(
                "tool_result", name=name, result=ToolResult(f"{name} done"), call_id=f"call_{name}"
            )

        for attempt in ("dead", "resumed"):
            record.run_key, record.events_keyed, record.calls_keyed = "1", 0, {}
            emit("prompt", text="Survey.")
            call("a")
            call("b")
            if attempt == "dead":
                result("b")
            else:
                result("a")
                result("b")
                emit("text", text="both done")
        shown = [(e["type"], e["payload"].get("text") or e["payload"].get("name"))
                 for e in manager.store.events(record.id)]  # fmt: skip
        assert shown == [
            ("message", "Survey."), ("tool_call", "a"), ("tool_call", "b"),
            ("tool_result", "b done"), ("tool_result", "a done"), ("message", "both done"),
        ]  # fmt: skip
    finally:
        runtime.close()
