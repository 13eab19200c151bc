"""``task_send`` on the DBOS engine: a message to an active child is in the store's
inbox, committed before the tool answers, and the run that executes the child, in whichever
process, takes it after its prompt; a replayed run takes the same batch again. An interrupt is a
store flag the child's executor reads at its cancel poll."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is, last, text_of, user_texts
from test_dbos import KERNOS, env, use_dbos
from test_dbos_replay import queued_child
from test_store_claims import race
from tests import _wait as wait
from tests.conftest import Worker

from kernos.runtime import Runtime, Store, load_config
from kernos.tasks import TaskManager, TaskStore
from kernos.tasks._store import executor_id
from kernos.testing import FakeOpenAIServer, text, tool_call


def task_row(task_id: str, status: str = "running", epoch: int = 1) -> dict[str, Any]:
    return {"id": task_id, "parent_session": "s_parent", "target_kind": "agent",
            "target": "explore", "model": "openai-chat:test", "status": status,
            "residency": "resident", "created_at": time.time(), "engine": "dbos",
            "executor": executor_id(), "run_epoch": epoch}  # fmt: skip


# -- the inbox: pure store behaviour, both databases -------------------------------------------
def test_a_take_returns_its_batch_again_on_a_replay_and_later_messages_to_the_next(
    store_target: str,
) -> None:
    store = Store(store_target)
    tasks = TaskStore(store)
    try:
        tasks.insert(task_row("t_1"))
        tasks.insert(task_row("t_2"))
        assert [tasks.send("t_1", m) for m in ("first", "second")] == [1, 2]
        assert tasks.send("t_2", "other") == 1  # each task its own inbox
        assert tasks.take_messages("t_1", 1, 1)[0] == ["first", "second"]  # in send order
        assert tasks.take_messages("t_1", 1, 1)[0] == ["first", "second"]  # a replay: the same
        assert tasks.send("t_1", "third") == 1  # the first not taken yet
        assert tasks.take_messages("t_1", 1, 1)[0] == ["first", "second"]  # not joined by it
        assert tasks.take_messages("t_1", 1, 2)[0] == ["third"]
        assert tasks.take_messages("t_1", 1, 3)[0] == []
        assert tasks.take_messages("t_1", 1, 2)[0] == ["third"]
        assert tasks.take_messages("t_1", 2, 1)[0] == []  # a revival: nothing of run 1 again
        assert tasks.take_messages("t_2", 1, 1)[0] == ["other"]
    finally:
        store.close()


@pytest.mark.parametrize("status", ["completed", "cancelled", "lost", None])
def test_a_message_to_a_task_that_is_not_active_is_not_stored(
    store_target: str, status: str | None
) -> None:
    store = Store(store_target)
    tasks = TaskStore(store)
    try:
        if status is not None:
            tasks.insert(task_row("t_1", status=status))
        assert tasks.send("t_1", "too late") is None
        assert tasks.take_messages("t_1", 1, 1)[0] == []
        assert store.query("SELECT COUNT(*) FROM task_inbox")[0][0] == 0
    finally:
        store.close()


def test_a_pending_task_s_messages_wait_for_its_run(store_target: str) -> None:
    store = Store(store_target)
    tasks = TaskStore(store)
    try:
        tasks.insert(task_row("t_1", status="pending"))
        assert tasks.send("t_1", "a") == 1 and tasks.send("t_1", "b") == 2
        assert tasks.take_messages("t_1", 1, 1)[0] == ["a", "b"]
    finally:
        store.close()


def test_takes_racing_sends_lose_nothing_and_take_nothing_twice(store_target: str) -> None:
    """Three senders and one taker, each on a connection of its own, at once: every message is
    taken by exactly one take, and each sender's messages come in the order it sent them."""
    setup = TaskStore(Store(store_target))
    setup.insert(task_row("t_1"))
    setup.flush()
    stores = [TaskStore(Store(store_target)) for _ in range(4)]
    per_sender = 25

    def work(n: int, store: TaskStore) -> list[list[str]]:
        if n < 3:
            for m in range(per_sender):
                assert store.send("t_1", f"{n}:{m}") is not None
            return []
        batches: list[list[str]] = []

        def took_all() -> bool:
            batches.append(store.take_messages("t_1", 1, len(batches) + 1)[0])
            return sum(len(b) for b in batches) >= 3 * per_sender

        wait.wait_for(took_all, f"all {3 * per_sender} messages taken", 60, interval=0)
        return batches

    batches = race(stores, work)[3]
    taken = [m for batch in batches for m in batch]
    assert sorted(taken) == sorted(f"{n}:{m}" for n in range(3) for m in range(per_sender))
    for n in range(3):
        mine = [int(m.split(":")[1]) for m in taken if m.startswith(f"{n}:")]
        assert mine == list(range(per_sender))
    for take, batch in enumerate(batches, 1):  # and a replay of any take gets the same batch
        assert stores[0].take_messages("t_1", 1, take)[0] == batch
    for store in [setup, *stores]:
        store.store.close()


def test_a_send_replayed_under_its_key_is_stored_once(store_target: str) -> None:
    """A durable run resumed after a crash makes a ``task_send`` whose message committed again,
    under the same key: the inbox keeps the first, and the answer is its place as before (1
    once it was taken). Other keys, and sends with none, are stored each time."""
    store = Store(store_target)
    tasks = TaskStore(store)
    try:
        tasks.insert(task_row("t_1"))
        tasks.insert(task_row("t_2"))
        assert tasks.send("t_1", "first", key="wf:3") == 1
        assert tasks.send("t_1", "first", key="wf:3") == 1  # the replay: nothing new
        assert tasks.send("t_1", "second", key="wf:5") == 2  # another step's
        assert tasks.send("t_1", "second", key="wf:5") == 2
        assert tasks.send("t_1", "first", key="wf:3") == 1  # still its place, not the last
        assert tasks.send("t_2", "other", key="wf:3") == 1  # a key is per task
        assert [tasks.send("t_1", "plain") for _ in range(2)] == [3, 4]  # no key: each stored
        assert tasks.take_messages("t_1", 1, 1)[0] == ["first", "second", "plain", "plain"]
        assert tasks.send("t_1", "second", key="wf:5") == 1  # taken: a replay reads 1
        assert tasks.take_messages("t_1", 1, 2)[0] == []  # and is not given again
        tasks.update("t_1", status="completed")
        assert tasks.send("t_1", "first", key="wf:3") == 1  # it ended since: as the first said
        assert tasks.send("t_1", "late", key="wf:9") is None  # a new send to it: not stored
        assert tasks.take_messages("t_2", 1, 1)[0] == ["other"]
        assert store.query("SELECT COUNT(*) FROM task_inbox")[0][0] == 5
    finally:
        store.close()


def test_senders_racing_with_one_key_store_one_message(store_target: str) -> None:
    """A run's replay and its first attempt (two processes) sending under the same key at
    once, each on a connection of its own: one message, and both answers say where it is."""
    setup = TaskStore(Store(store_target))
    setup.insert(task_row("t_1"))
    setup.flush()
    stores = [TaskStore(Store(store_target)) for _ in range(3)]
    keys = 20

    def work(n: int, store: TaskStore) -> list[int | None]:
        return [store.send("t_1", f"message {k}", key=f"wf:{k}") for k in range(keys)]

    answers = race(stores, work)
    assert answers[0] == answers[1] == answers[2] == list(range(1, keys + 1))
    assert setup.take_messages("t_1", 1, 1)[0] == [f"message {k}" for k in range(keys)]
    for store in [setup, *stores]:
        store.store.close()


def test_messages_stored_before_send_keys_stay_readable(store_target: str) -> None:
    """A store at migration 7 with messages waiting: migration 8 keeps them (no key), and
    keyed sends follow them."""
    from kernos.tasks._store import MIGRATIONS

    store = Store(store_target)
    store.migrate("tasks", MIGRATIONS[:7])
    store.execute(
        "INSERT INTO tasks (id, parent_session, target_kind, target, model, status, residency,"
        " created_at, updated_at, engine) VALUES ('t_1', 's_1', 'agent', 'explore', 'm',"
        " 'running', 'resident', 0, 0, 'dbos')"
    )
    store.execute(
        "INSERT INTO task_inbox (task_id, seq, message, created_at) VALUES ('t_1', 1, 'old', 0)"
    )
    tasks = TaskStore(store)
    try:
        assert store.versions("tasks") == [1, 2, 3, 4, 5, 6, 7, 8, 9]
        assert tasks.send("t_1", "new", key="wf:1") == 2
        assert tasks.send("t_1", "new", key="wf:1") == 2
        assert tasks.take_messages("t_1", 1, 1)[0] == ["old", "new"]
    finally:
        store.close()


def test_an_interrupt_is_asked_of_the_executor_of_that_run_only(store_target: str) -> None:
    store = Store(store_target)
    tasks = TaskStore(store)
    try:
        tasks.insert(task_row("t_1"))
        tasks.insert(task_row("t_2"))
        tasks.insert({**task_row("t_3"), "executor": "elsewhere:1"})
        tasks.insert(task_row("t_4", status="pending"))
        assert tasks.control_requests() == ([], [])
        assert tasks.request_interrupt("t_1", 1) and tasks.request_interrupt("t_3", 1)
        assert not tasks.request_interrupt("t_2", 2)  # not its current run
        assert not tasks.request_interrupt("t_4", 1)  # not running
        assert tasks.control_requests() == ([], ["t_1"])  # t_3 is another executor's
        # the run's take after its prompt says so too (the same query), and takes nothing
        assert tasks.send("t_1", "unread") == 1
        assert tasks.take_messages("t_1", 1, 1) == ([], True)
        assert tasks.take_messages("t_2", 1, 1) == ([], False)
        assert tasks.take_messages("t_1", 2, 1) == (["unread"], False)  # a later run reads it
        assert [e["type"] for e in tasks.events("t_1")] == ["interrupt_requested"]
        tasks.request_cancel("t_1")  # asked both: a cancel
        assert tasks.control_requests() == (["t_1"], [])
        tasks.update("t_3", run_epoch=2, executor=executor_id())  # a revival of t_3: not asked
        assert tasks.control_requests() == (["t_1"], [])
    finally:
        store.close()


# -- real processes: `kernos run` spawns, `kernos worker` executes --------------------------------
FOLLOW_UP = {"to": "survey", "message": "Also count the tests."}
SPAWN = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
         "run_in_background": True}  # fmt: skip


def wait_asked(
    server: FakeOpenAIServer, match: Any, procs: Sequence[wait.Alive], what: str
) -> None:
    """Until the server was asked a request ``match`` accepts, while ``procs`` run."""
    asked = lambda: any(match(r) for r in server.requests)  # noqa: E731
    wait.wait_for(asked, f"{what}: {server}", alive=procs)


def follow_up_script(
    server: FakeOpenAIServer, first_answer: threading.Event, second: threading.Event
) -> None:
    """The parent spawns ``survey`` and sends it a follow-up while its first prompt's request is
    held (``first_answer``); the child's second prompt is answered once ``second`` is set."""
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        tool_call("task_send", FOLLOW_UP, when=agent_is("MAIN-AGENT", "Started task")),
        text("Waiting.", when=agent_is("MAIN-AGENT", "Delivered to")),
        text(
            "The survey found 3 modules.",
            when=agent_is("EXPLORE-AGENT", "Survey the"),
            hold=first_answer,
        ),
        text("12 tests.", when=agent_is("EXPLORE-AGENT", "Also count"), hold=second, repeat=True),
        text("Survey: 12 tests.", when=agent_is("MAIN-AGENT", "task completion")),
    )


def child_asked(server: FakeOpenAIServer, latest: str) -> list[dict[str, Any]]:
    return [r for r in server.requests if agent_is("EXPLORE-AGENT", latest)(r)]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest) -> str | None:
    """Where the processes' store is: ``None``, SQLite under the project's home; or the URL of
    a fresh PostgreSQL database (DBOS's system database in it too)."""
    if request.param == "sqlite":
        return None
    return str(request.getfixturevalue("fresh_postgres_url"))


def launch_env(project: Path, server: FakeOpenAIServer, url: str | None) -> dict[str, str]:
    """The processes' environment: the store at ``url`` (``None``: SQLite in the project)."""
    environ = env(project, server)
    environ.pop("KERNOS_STORE_URL", None)
    if url is not None:
        environ["KERNOS_STORE_URL"] = url
    return environ


def launch(
    project: Path, server: FakeOpenAIServer, url: str | None, *args: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [KERNOS, *args], cwd=project, env=launch_env(project, server, url),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def open_store(project: Path, url: str | None) -> Store:
    return Store(url) if url is not None else Store(project / ".kernos" / "kernos.db")


def ended(project: Path, url: str | None, status: str) -> dict[str, Any]:
    """The task's row once it is ``status``."""
    store = open_store(project, url)
    try:
        query = "SELECT * FROM tasks WHERE status = ?"
        return dict(wait.wait_for(lambda: store.query(query, (status,)), f"a task {status}")[0])
    finally:
        store.close()


def transcript_of(
    project: Path, url: str | None, task: dict[str, Any]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The task's messages as ``(type, text)`` and its child session's turns as
    ``(role, text)``."""
    store = open_store(project, url)
    try:
        events = [
            (e["type"], str(e["payload"].get("text")))
            for e in TaskStore(store).events(task["id"])
            if e["type"] == "message"
        ]
        turns = [(t["role"], t["text"]) for t in store.turns(task["child_session"])]
    finally:
        store.close()
    return events, turns


@pytest.mark.slow
def test_a_follow_up_to_a_worker_s_child_is_its_second_prompt(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[subprocess.Popen[str]],
    store_url: str | None,
    worker: Callable[..., Worker],
) -> None:
    use_dbos(project, run_executes="false")
    first_answer, second = threading.Event(), threading.Event()
    second.set()
    follow_up_script(server, first_answer, second)
    executing = worker(project, launch_env(project, server, store_url))
    run = launch(project, server, store_url, "run", "survey it", "-q")
    procs.append(run)
    try:
        wait_asked(
            server, agent_is("MAIN-AGENT", "Delivered to"), [run, executing], "never delivered"
        )
    finally:
        first_answer.set()
    out, errors = run.communicate(timeout=120)
    assert run.returncode == 0, errors
    assert out == "Survey: 12 tests.\n"
    task = ended(project, store_url, "completed")
    assert task["final_text"] == "12 tests."
    assert task["executor"] == f"{socket.gethostname()}:{executing.pid}"  # not the run's process
    (asked,) = child_asked(server, "Also count")  # the worker's child got it, once
    assert text_of(last(asked)) == "Also count the tests."
    notices = [t for t in user_texts(server, "MAIN-AGENT") if "task completion" in t]
    assert len(notices) == 1 and '"12 tests."' in notices[0]


@pytest.mark.slow
def test_a_worker_killed_in_the_child_s_second_prompt_is_resumed_with_the_message(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[subprocess.Popen[str]],
    store_url: str | None,
    worker: Callable[..., Worker],
) -> None:
    """The message was taken by the killed worker's run; the resumed run on a second worker
    replays the first prompt from its record and takes the same message again (its take's key)."""
    use_dbos(project, run_executes="false", on_crash='"resume"', heartbeat="0.5")
    first_answer, second = threading.Event(), threading.Event()
    follow_up_script(server, first_answer, second)
    first = worker(project, launch_env(project, server, store_url))
    run = launch(project, server, store_url, "run", "survey it", "-q")
    procs.append(run)
    try:
        wait_asked(server, agent_is("MAIN-AGENT", "Delivered to"), [run, first], "never delivered")
        first_answer.set()
        wait_asked(server, agent_is("EXPLORE-AGENT", "Also count"), [run, first], "no 2nd prompt")
        first.kill()
        resumer = worker(project, launch_env(project, server, store_url))
    finally:
        first_answer.set()
        second.set()
    out, errors = run.communicate(timeout=120)
    assert run.returncode == 0, errors
    assert out == "Survey: 12 tests.\n"
    task = ended(project, store_url, "completed")
    assert task["final_text"] == "12 tests."
    assert task["executor"] == f"{socket.gethostname()}:{resumer.pid}"
    assert len(child_asked(server, "Survey the")) == 1  # replayed from its record
    assert len(child_asked(server, "Also count")) == 2  # the in-flight one, again
    events, turns = transcript_of(project, store_url, task)
    assert events.count(("message", "Also count the tests.")) == 1
    assert events.count(("message", "12 tests.")) == 1
    assert turns[1:] == [
        ("assistant", "The survey found 3 modules."), ("user", "Also count the tests."),
        ("assistant", "12 tests."),
    ]  # fmt: skip


@pytest.mark.slow
def test_an_interrupt_from_the_parent_stops_a_worker_s_child(
    project: Path,
    server: FakeOpenAIServer,
    procs: list[subprocess.Popen[str]],
    store_url: str | None,
    worker: Callable[..., Worker],
) -> None:
    """The child's first request is held until the parent's interrupt was answered (committed
    in the store); the worker's run then ends ``interrupted`` and reads no follow-up (an
    interrupted child sends no notice, :data:`kernos.tasks._state.NOTIFY`)."""
    use_dbos(project, run_executes="false")
    answered = threading.Event()
    interrupt = {"to": "survey", "deliver_as": "interrupt"}
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        tool_call("task_send", FOLLOW_UP, when=agent_is("MAIN-AGENT", "Started task")),
        tool_call("task_send", interrupt, when=agent_is("MAIN-AGENT", "Delivered to")),
        text("Stopping it.", when=agent_is("MAIN-AGENT", "Interrupting")),
        text(
            "The survey found 3 modules.",
            when=agent_is("EXPLORE-AGENT", "Survey the"),
            hold=answered,
        ),
        # a child that completed would notice the parent: the run's output would be this
        text("Interrupted, as asked.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    executing = worker(project, launch_env(project, server, store_url))
    run = launch(project, server, store_url, "run", "survey it", "-q")
    procs.append(run)
    try:
        wait_asked(server, agent_is("MAIN-AGENT", "Interrupting"), [run, executing], "no interrupt")
        wait_asked(server, agent_is("EXPLORE-AGENT", "Survey the"), [run, executing], "no child")
    finally:
        answered.set()
    out, errors = run.communicate(timeout=120)
    assert run.returncode == 0, errors
    assert out == "Stopping it.\n"  # the run waited for the child, which sends no notice
    task = ended(project, store_url, "interrupted")
    assert task["final_text"] == "The survey found 3 modules."
    assert task["executor"] == f"{socket.gethostname()}:{executing.pid}"
    assert child_asked(server, "Also count") == []  # stopped: the follow-up is not read
    assert not [t for t in user_texts(server, "MAIN-AGENT") if "task completion" in t]


async def test_an_interrupt_asked_in_the_store_stops_the_run_after_its_current_step(
    project: Path, server: FakeOpenAIServer
) -> None:
    """Asked by another process (its own store connection) while the child's first request is
    in flight: the executor's cancel poll stops the run after that step, so the tool call it
    answered runs and no second request is sent (the take after the prompt alone would let
    the prompt go on)."""
    use_dbos(project)
    held = threading.Event()
    server.script(
        tool_call("no_such_tool", {}, when=agent_is("EXPLORE-AGENT", "Survey."), hold=held),
        text("the survey", when=agent_is("EXPLORE-AGENT"), repeat=True),
    )
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    other = TaskStore(Store(project / ".kernos" / "kernos.db"))
    try:
        session = runtime.session("main", record_turns=False)
        session.add_tools(manager.tools_for(session))
        call = {"prompt": "Survey.", "subagent_type": "explore"}
        (record,) = manager.spawn(session, manager.resolve(call, session), background=True)
        await wait.until(lambda: server.requests, "the child to ask the model")
        assert other.request_interrupt(record.id, 1)
        # this process's cancel poll reads it
        await wait.until(lambda: record.interrupt, "the executor to read the interrupt")
        held.set()
        assert await manager.wait([record], timeout=60)
        assert record.status == "interrupted"
        assert len(server.requests) == 1
        stored = manager.store.get(record.id)
        assert stored is not None and stored["status"] == "interrupted"
    finally:
        held.set()
        other.store.close()
        await manager.aclose(wait=True)
        runtime.close()


async def test_messages_to_a_queued_child_wait_in_the_store_and_come_as_one_turn(
    project: Path, server: FakeOpenAIServer
) -> None:
    """Beyond the model's limit a child is pending: each message is queued in the store with
    its position, and the child reads them together after its first prompt, in send order."""
    from kernos.boundary import ToolContext, call_tool

    config = project / "kernos.toml"
    config.write_text(config.read_text("utf-8").replace("concurrency = 5", "concurrency = 1"))
    use_dbos(project)
    held = threading.Event()
    server.script(
        text("first done", when=agent_is("EXPLORE-AGENT", "First."), hold=held),
        text("second done", when=agent_is("EXPLORE-AGENT", "Second.")),
        text("both read", when=agent_is("EXPLORE-AGENT", "one\n\ntwo")),
    )
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        session = runtime.session("main", record_turns=False)
        session.add_tools(manager.tools_for(session))
        spawned = []
        for prompt, name in (("First.", "a"), ("Second.", "b")):
            call = {"prompt": prompt, "subagent_type": "explore", "name": name}
            spawned += manager.spawn(session, manager.resolve(call, session), background=True)
        first, queued = spawned
        assert queued.status == "pending"

        async def send(message: str) -> str:
            args = {"to": "b", "message": message}
            ctx = ToolContext(extras={"session": session})
            return (await call_tool(session.tools["task_send"], args, ctx)).text

        assert await send("one") == f"Queued for {queued.id} at position 1."
        assert await send("two") == f"Queued for {queued.id} at position 2."
        assert queued.session is not None and queued.session.pending_messages == 0
        held.set()
        assert await manager.wait(spawned, timeout=60)
        assert (queued.status, queued.final_text) == ("completed", "both read")
        assert first.final_text == "first done"
    finally:
        held.set()
        await manager.aclose(wait=True)
        runtime.close()


async def test_a_message_that_comes_as_the_child_ends_elsewhere_continues_it(
    project: Path, server: FakeOpenAIServer
) -> None:
    """The child's row ended (another process ran it) while this record still shows it
    running: nothing goes to the inbox, and once the record followed the end the message
    revives the child instead of being lost."""
    from kernos.boundary import ToolContext, call_tool

    runtime, manager, session, record = await queued_child(project)
    other = TaskStore(Store(project / ".kernos" / "kernos.db"))
    try:
        assert record.status == "running"
        other.update(record.id, status="completed", final_text="done elsewhere",
                     finished_at=time.time())  # fmt: skip
        other.flush()
        args = {"to": record.id, "message": "And one more thing."}
        sent = await call_tool(
            session.tools["task_send"], args, ToolContext(extras={"session": session})
        )
        assert sent.text == f"Revived {record.id} (run epoch 2)."
        assert other.store.query("SELECT COUNT(*) FROM task_inbox")[0][0] == 0
        stored = manager.store.get(record.id)
        assert stored is not None and stored["run_epoch"] == 2
    finally:
        other.store.close()
        manager.cancel(record, "test over")
        await manager.aclose(wait=True)
        runtime.close()
