"""``kernos run`` and ``kernos tasks`` as real subprocesses against the local server: a process
killed mid-task leaves its child ``lost``; ``--no-wait`` abandons children as ``lost``."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is, seen
from tests import _cli
from tests._wait import wait_for

from kernos.testing import FakeOpenAIServer, text, tool_call

KERNOS = str(Path(sys.executable).with_name("kernos"))
SPAWN = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey",
         "run_in_background": True, "category": "", "model": "", "tasks": []}  # fmt: skip


class GatedServer(FakeOpenAIServer):
    """A server whose child replies are held (``hold=gate``) while the parent's go on."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()


@pytest.fixture
def gated() -> Iterator[GatedServer]:
    fake = GatedServer()
    with fake:
        yield fake
        fake.gate.set()


def env(project: Path, server: FakeOpenAIServer) -> dict[str, str]:
    return {**os.environ, **server.env(), "KERNOS_HOME": str(project / ".kernos")}


def kernos(project: Path, server: FakeOpenAIServer, *args: str) -> subprocess.CompletedProcess[str]:
    return _cli.kernos(*args, cwd=project, env=env(project, server), timeout=60)


def script_held_child(gated: GatedServer, started: str = "Started; waiting.") -> None:
    """The main agent spawns the survey child and says ``started``; the child's answer is held
    on ``gated.gate`` and never delivered."""
    gated.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text(started, when=agent_is("MAIN-AGENT", "Started task")),
        text("never delivered", when=agent_is("EXPLORE-AGENT"), hold=gated.gate),
    )


def tasks_json(project: Path, server: FakeOpenAIServer) -> list[dict[str, Any]]:
    listed = kernos(project, server, "tasks", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    tasks: list[dict[str, Any]] = json.loads(listed.stdout)["tasks"]
    return tasks


def wait_for_status(
    project: Path, status: str, timeout: float = 60.0, *, taken: bool = False
) -> str:
    """The id of a task in ``status`` (``taken``: and an executor runs it)."""
    query = "SELECT id FROM tasks WHERE status = ?" + (" AND executor IS NOT NULL" * taken)

    def found() -> list[Any]:
        try:
            with sqlite3.connect(project / ".kernos" / "kernos.db") as db:
                return db.execute(query, (status,)).fetchall()
        except sqlite3.OperationalError:
            return []

    return str(wait_for(found, f"a task {status}", timeout)[0][0])


def test_a_killed_run_leaves_its_child_lost(project: Path, gated: GatedServer) -> None:
    script_held_child(gated)
    proc = subprocess.Popen(
        [KERNOS, "run", "survey it", "-q"], cwd=project, env=env(project, gated),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        task_id = wait_for_status(project, "running")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    listed = kernos(project, gated, "tasks", "list")
    assert listed.returncode == 0, listed.stderr
    header, line = listed.stdout.splitlines()
    assert header.split() == [
        "ID",
        "STATUS",
        "RESIDENCY",
        "EPOCH",
        "TARGET",
        "NAME",
        "LABEL",
        "CREATED",
        "EXECUTOR",
    ]
    assert line.split()[:3] == [task_id, "lost", "disposed"]
    # the executor; on the DBOS engine a child killed before its queue's poll never had one
    ran_by = f"{socket.gethostname()}:{proc.pid}"
    queued = os.environ.get("KERNOS_TASK_ENGINE") == "dbos"
    assert line.split()[-1] in ((ran_by, "-") if queued else (ran_by,))
    shown = kernos(project, gated, "tasks", "show", task_id)
    assert f"error: the process that ran it (pid {proc.pid}) ended" in shown.stdout
    assert f"executor: {line.split()[-1]} (" in shown.stdout
    transcript = kernos(project, gated, "tasks", "output", task_id, "--tail", "2")
    assert transcript.stdout.splitlines()[-1].startswith("[status] running → lost")
    cancel = kernos(project, gated, "tasks", "cancel", task_id)
    assert cancel.returncode == 1 and "is lost; nothing changed" in cancel.stderr


def test_no_wait_abandons_unfinished_children_as_lost(project: Path, gated: GatedServer) -> None:
    running = threading.Event()  # the child is in its model request here, not still queued
    # the parent answers once its child runs: a child still queued when a --no-wait run leaves
    # is the executors' to run (on the DBOS engine), not lost
    gated.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; not waiting.", when=agent_is("MAIN-AGENT", "Started task"), hold=running),
        text("never delivered", when=seen(agent_is("EXPLORE-AGENT"), running), hold=gated.gate),
    )
    run = kernos(project, gated, "run", "survey it", "--no-wait", "-q")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "Started; not waiting.\n"
    assert [t["status"] for t in tasks_json(project, gated)] == ["lost"]


def test_run_waits_for_background_children_and_delivers_them(
    project: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("The survey found 3 modules.", when=agent_is("EXPLORE-AGENT")),
        text("Survey: 3 modules.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    run = kernos(project, server, "run", "survey it")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "Survey: 3 modules.\n"
    assert "(t_" in run.stderr and ", running). Its result is delivered" in run.stderr
    (task,) = tasks_json(project, server)
    # a settled child is evicted at exit, not disposed: a later run may continue it
    assert (task["status"], task["residency"]) == ("completed", "evicted")
    task_id = task["id"]
    out = kernos(project, server, "tasks", "output", task_id)
    assert "[assistant] The survey found 3 modules." in out.stdout


def test_cancel_from_another_process_ends_the_live_child_cancelled(
    project: Path, gated: GatedServer
) -> None:
    script_held_child(gated)
    owner = subprocess.Popen(
        [KERNOS, "run", "survey it", "-q"], cwd=project, env=env(project, gated),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # live: an executor runs it (on the DBOS engine a child shows running as it is spawned,
        # before a process dequeued it; one no executor took is cancelled in the store at once)
        task_id = wait_for_status(project, "running", taken=True)
        cancel = kernos(project, gated, "tasks", "cancel", task_id)
        assert cancel.returncode == 0, cancel.stderr
        assert f"cancel requested for {task_id}" in cancel.stdout
        out, errors = owner.communicate(timeout=60)  # the gate is still shut: the child stopped
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.communicate()
    assert owner.returncode == 0, errors
    assert out == "Started; waiting.\n"
    assert "Error" not in errors and "Traceback" not in errors
    log = (project / ".kernos" / "kernos.log").read_text(encoding="utf-8")
    assert "IntegrityError" not in log and "Traceback" not in log
    (task,) = tasks_json(project, gated)
    assert (task["id"], task["status"], task["residency"]) == (task_id, "cancelled", "disposed")
    history = kernos(project, gated, "tasks", "output", task_id).stdout.splitlines()
    cancelled = "[status] running → cancelled (run epoch 1) — cancelled from the command line"
    assert cancelled in history
    assert "lost" not in kernos(project, gated, "tasks", "show", task_id).stdout


def test_output_follow_streams_a_running_child_until_it_ends(
    project: Path, gated: GatedServer
) -> None:
    gated.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("The survey found 3 modules.", when=agent_is("EXPLORE-AGENT"), hold=gated.gate),
        text("Survey: 3 modules.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    owner = subprocess.Popen(
        [KERNOS, "run", "survey it", "-q"], cwd=project, env=env(project, gated),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    follower: subprocess.Popen[str] | None = None
    try:
        task_id = wait_for_status(project, "running")
        follower = subprocess.Popen(
            [KERNOS, "tasks", "output", task_id, "--follow"], cwd=project,
            env=env(project, gated), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert follower.stdout is not None
        first = follower.stdout.readline()  # printed while the child is still held
        assert first.startswith("[status] created → pending"), first
        assert follower.poll() is None
        gated.gate.set()
        rest, errors = follower.communicate(timeout=60)
        out, _ = owner.communicate(timeout=60)
    finally:
        for proc in (owner, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert follower.returncode == 0, errors
    lines = [first.rstrip("\n"), *rest.splitlines()]
    assert "[assistant] The survey found 3 modules." in lines
    assert any(line.startswith("[status] running → completed") for line in lines), lines
    assert out == "Survey: 3 modules.\n"


def test_json_documents_of_show_and_output(project: Path, server: FakeOpenAIServer) -> None:
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("The survey found 3 modules.", when=agent_is("EXPLORE-AGENT")),
        text("Survey: 3 modules.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    assert kernos(project, server, "run", "survey it", "-q").returncode == 0
    (task,) = tasks_json(project, server)
    assert list(task) == [
        "id", "status", "residency", "run_epoch", "target_kind", "target", "model", "name",
        "label", "parent_session", "child_session", "depth", "background", "owner_pid", "error",
        "created_at", "started_at", "finished_at", "updated_at", "executor",
        "requests", "input_tokens", "output_tokens", "cached_tokens", "cost",
    ]  # fmt: skip
    assert (task["target"], task["name"], task["background"]) == ("explore", "survey", True)
    assert task["executor"].rpartition(":")[0] == socket.gethostname()
    shown = json.loads(kernos(project, server, "tasks", "show", task["id"], "--json").stdout)
    assert shown["task"]["final_text"] == "The survey found 3 modules."
    assert "[status] running → completed (run epoch 1)" in [h["text"] for h in shown["history"]]
    output = json.loads(kernos(project, server, "tasks", "output", task["id"], "--json").stdout)
    assert (output["id"], output["status"]) == (task["id"], "completed")
    assert {"seq", "type", "at", "text", "payload"} == set(output["events"][0])
    assert any(e["text"] == "[assistant] The survey found 3 modules." for e in output["events"])
    both = kernos(project, server, "tasks", "output", task["id"], "--json", "--follow")
    assert both.returncode == 2 and "drop --json" in both.stderr
