"""``kernos run --no-wait``: the ``task`` answer does not promise a result the run will never
deliver, and stderr names each child the run left unfinished and how to read it."""

from __future__ import annotations

import os
from pathlib import Path

from tasks_helpers import agent_is
from test_cli import SPAWN, GatedServer, gated, kernos, script_held_child, tasks_json

from kernos.testing import text, tool_call

__all__ = ["gated"]  # the fixture, shared with test_cli


def test_no_wait_answers_truly_and_names_the_children_it_left(
    project: Path, gated: GatedServer
) -> None:
    script_held_child(gated, "Started; not waiting.")
    run = kernos(project, gated, "run", "survey it", "--no-wait", "-q")
    assert run.returncode == 0, run.stderr
    answer = next(
        m["content"]
        for r in gated.requests
        for m in r["messages"]
        if m.get("role") == "tool" and "Started task" in str(m.get("content"))
    )
    assert answer.startswith("Started task survey (t_")
    assert "delivered to you automatically" not in answer
    assert "no result of a child will be delivered to you" in answer
    (task,) = tasks_json(project, gated)
    # the local engine stops it as the run ends; the DBOS engine leaves it to `kernos worker`
    # processes (with none, a later process finds it lost)
    on_dbos = os.environ.get("KERNOS_TASK_ENGINE") == "dbos"
    fate = (
        "left to the workers (running)" if on_dbos else "stopped unfinished (lost) as the run ended"
    )
    assert (
        f"child {task['id']} (survey) {fate}; read it with `kernos tasks output {task['id']}`"
        in run.stderr.splitlines()
    ), run.stderr


def test_a_waiting_run_still_promises_delivery(project: Path, gated: GatedServer) -> None:
    gated.gate.set()
    gated.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("Three modules.", when=agent_is("EXPLORE-AGENT")),
        text("Done.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    run = kernos(project, gated, "run", "survey it", "-q")
    assert run.returncode == 0, run.stderr
    started = next(
        m["content"]
        for r in gated.requests
        for m in r["messages"]
        if m.get("role") == "tool" and "Started task" in str(m.get("content"))
    )
    assert "Its result is delivered to you automatically" in started
    assert "child t_" not in run.stderr


def test_a_left_child_is_told_with_what_ended_and_where_its_result_will_be() -> None:
    from kernos._app import LeftChild

    lost, queued = LeftChild("t_1", "survey", "lost"), LeftChild("t_2", "map", "pending")
    assert lost.line("the chat") == (
        "child t_1 (survey) stopped unfinished (lost) as the chat ended; "
        "read it with `kernos tasks output t_1`"
    )
    assert queued.line("the run") == (
        "child t_2 (map) left to the workers (pending); read it with `kernos tasks output t_2`"
    )
