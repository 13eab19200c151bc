"""Durable approvals: a background child's asked call waits as an approval request in the store
(the task ``waiting``, the parent told which request) and anyone sharing the store answers it with
``kernos approve`` / ``kernos deny`` from another process; a denial reaches the model with its
reason; ``[permissions] wait`` bounds the wait; bad answers are one line and exit 2."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests._agents import CONFIG, agent_is
from tests._wait import wait_for
from tests.cli.test_run import kernos
from tests.conftest import KERNOS

SPAWN = {"prompt": "Write the notes.", "subagent_type": "explore", "name": "notes",
         "run_in_background": True}  # fmt: skip


def _script(server: FakeOpenAIServer, after_answer: str, child_says: str) -> None:
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "delegate")),
        text("Started it.", when=agent_is("MAIN-AGENT", "notes")),
        tool_call(
            "write_file", {"path": "bg.txt", "content": "c\n"}, when=agent_is("EXPLORE-AGENT")
        ),
        text("Waiting for the person.", when=agent_is("MAIN-AGENT", "kernos approve")),
        text(child_says, when=agent_is("EXPLORE-AGENT", after_answer)),
        text("All done.", when=agent_is("MAIN-AGENT", child_says)),
    )


def _start(server: FakeOpenAIServer, cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KERNOS_MODEL", "OPENAI_API_KEY")}
    env.update(server.env(), KERNOS_HOME=str(cwd / ".kernos"))
    return subprocess.Popen(
        [KERNOS, "run", "delegate"], cwd=cwd, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _open_requests(cwd: Path) -> list[dict[str, Any]]:
    listed = kernos("approvals", "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    requests: list[dict[str, Any]] = json.loads(listed.stdout)["requests"]
    return requests


def _task_status(cwd: Path, task_id: str) -> str:
    listed = kernos("tasks", "list", "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    rows = rows["tasks"] if isinstance(rows, dict) else rows
    return next(str(r["status"]) for r in rows if r["id"] == task_id)


def _finish(run: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err
    return out, err


@contextlib.contextmanager
def _asking(
    server: FakeOpenAIServer, cwd: Path, *, kill: bool = False
) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """``kernos run delegate`` in ``cwd`` until its background child's one approval request is
    open: the run and the request. On the way out the run is killed (SIGKILL: the process that
    ran the child is gone) when ``kill`` says so or when it still runs."""
    run = _start(server, cwd)
    try:
        (request,) = wait_for(lambda: _open_requests(cwd), "an approval request", alive=[run])
        yield run, request
    finally:
        if kill or run.poll() is None:
            run.kill()
            run.communicate()


def test_a_background_child_waits_and_is_approved_from_another_process(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    _script(server, "Created bg.txt", "Wrote the notes.")
    with _asking(server, tmp_path) as (run, request):
        assert request["tool"] == "write_file"
        assert request["arguments"]["path"] == "bg.txt"
        assert "+c" in request["diff"]  # the unified diff the write would make
        assert _task_status(tmp_path, request["task_id"]) == "waiting"
        assert not (tmp_path / "bg.txt").exists()
        answered = kernos("approve", request["id"], cwd=tmp_path)
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.startswith(f"{request['id']} approved")
        out, _ = _finish(run)
    assert out == "All done.\n"
    assert (tmp_path / "bg.txt").read_text() == "c\n"
    notices = [str(r["messages"][-1]) for r in server.requests]
    assert any(request["id"] in n and "kernos approve" in n for n in notices)
    assert _open_requests(tmp_path) == []
    # answered once: a second answer is told who answered it and how, and changes nothing
    again = kernos("deny", request["id"], "--reason", "too late", cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1
    assert f"request {request['id']} was already approved by" in again.stderr
    assert "with kernos approve" in again.stderr
    assert _task_status(tmp_path, request["task_id"]) == "completed"


def test_a_denial_reaches_the_childs_model_with_its_reason(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    _script(server, "not in this repo", "Could not write.")
    with _asking(server, tmp_path) as (run, request):
        denied = kernos("deny", request["id"], "--reason", "not in this repo", cwd=tmp_path)
        assert denied.returncode == 0, denied.stderr
        out, _ = _finish(run)
    assert out == "All done.\n"
    assert not (tmp_path / "bg.txt").exists()
    (result,) = [r for r in server.tool_results() if "denied" in r]
    assert "denied it (not in this repo)" in result
    again = kernos("approve", request["id"], cwd=tmp_path)
    assert again.returncode == 2
    assert "was already denied by" in again.stderr
    assert "kernos deny: not in this repo" in again.stderr


def test_wait_zero_denies_at_once_and_a_short_wait_times_out(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG + '\n[permissions]\nwait = "0"\n')
    _script(server, "never wait", "Could not write.")
    out, _ = _finish(_start(server, tmp_path))
    assert out == "All done.\n"
    assert any('[permissions] wait is "0"' in r for r in server.tool_results())
    assert _open_requests(tmp_path) == []

    timed = tmp_path / "timed"
    timed.mkdir()
    (timed / "kernos.toml").write_text(CONFIG + '\n[permissions]\nwait = "0.2s"\n')
    _script(server, "within [permissions] wait", "Nobody answered.")
    out, _ = _finish(_start(server, timed))
    assert out == "All done.\n"
    assert not (timed / "bg.txt").exists()
    (result,) = [r for r in server.tool_results() if "within [permissions] wait" in r]
    request_id = result.split("approval request ")[1].split()[0]
    assert _open_requests(timed) == []
    late = kernos("approve", request_id, cwd=timed)
    assert late.returncode == 2
    assert f"request {request_id} is closed: nobody answered it within" in late.stderr


def test_answering_bad_ids_and_a_malformed_rule_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    unknown = kernos("approve", "a_00000000", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1
    assert "there is no approval request a_00000000" in unknown.stderr
    assert "`kernos approvals` lists the open ones" in unknown.stderr
    denied = kernos("deny", "nope", "--reason", "x", cwd=tmp_path)
    assert denied.returncode == 2 and "no approval request nope" in denied.stderr
    (tmp_path / "kernos.toml").write_text(CONFIG + '\n[permissions]\nask = ["write_file("]\n')
    broken = kernos("approvals", cwd=tmp_path)
    assert broken.returncode == 2
    assert "not a permission rule" in broken.stderr
    assert broken.stdout == ""
    (tmp_path / "kernos.toml").write_text(CONFIG + '\n[permissions]\nwait = "soon"\n')
    late = kernos("approvals", cwd=tmp_path)
    assert late.returncode == 2 and late.stdout == ""
    assert "'soon' is not a duration; write a duration such as" in late.stderr
    assert '("0": never wait, deny at once)' in late.stderr


def test_a_request_of_a_cancelled_or_lost_task_is_expired(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    _script(server, "was cancelled", "Stopped.")
    with _asking(server, tmp_path, kill=True) as (run, request):
        cancelled = kernos("tasks", "cancel", request["task_id"], cwd=tmp_path)
        assert cancelled.returncode == 0, cancelled.stderr
        wait_for(lambda: _open_requests(tmp_path) == [], "the request to close", alive=[run])
    late = kernos("approve", request["id"], cwd=tmp_path)
    assert late.returncode == 2
    assert f"request {request['id']} is closed: its task ended before it was answered" in (
        late.stderr
    )
    assert not (tmp_path / "bg.txt").exists()

    lost = tmp_path / "lost"
    lost.mkdir()
    (lost / "kernos.toml").write_text(CONFIG)
    _script(server, "never reached", "Never.")
    with _asking(server, lost, kill=True) as (_, request):
        pass  # killed on the way out: the process that ran the child is gone
    assert _task_status(lost, request["task_id"]) == "lost"  # the listing reconciles it
    assert _open_requests(lost) == []
    late = kernos("deny", request["id"], cwd=lost)
    assert late.returncode == 2
    assert "its task ended before it was answered (the task was lost: " in late.stderr


def test_the_time_a_child_waits_for_a_person_is_not_its_budgets(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # the child's wall-clock budget is 1 s; it waits longer than that for the answer
    (tmp_path / "kernos.toml").write_text(CONFIG + 'timeout = "1s"\n')
    _script(server, "Created bg.txt", "Wrote the notes.")
    with _asking(server, tmp_path) as (run, request):
        past = request["asked_at"] + 1.5
        wait_for(lambda: time.time() > past, "the child's budget to have passed", alive=[run])
        answered = kernos("approve", request["id"], cwd=tmp_path)
        assert answered.returncode == 0, answered.stderr
        out, _ = _finish(run)
    assert out == "All done.\n"
    assert (tmp_path / "bg.txt").read_text() == "c\n"


def test_interrupting_a_waiting_child_denies_its_request_as_interrupted(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG)
    stop = {"to": "notes", "deliver_as": "interrupt"}
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "delegate")),
        text("Started it.", when=agent_is("MAIN-AGENT", "notes")),
        tool_call(
            "write_file", {"path": "bg.txt", "content": "c\n"}, when=agent_is("EXPLORE-AGENT")
        ),
        tool_call("task_send", stop, when=agent_is("MAIN-AGENT", "kernos approve")),
        text("Told it to stop.", when=agent_is("MAIN-AGENT", "Interrupting")),
        text("It stopped.", when=agent_is("MAIN-AGENT", "interrupted")),
    )
    out, _ = _finish(_start(server, tmp_path))
    assert out in ("Told it to stop.\n", "It stopped.\n")
    assert not (tmp_path / "bg.txt").exists()
    listed = kernos("approvals", "--all", "--json", cwd=tmp_path)
    (request,) = json.loads(listed.stdout)["requests"]
    assert (request["state"], request["answered_how"], request["reason"]) == (
        "denied", "interrupt", "interrupted",
    )  # fmt: skip
    assert _task_status(tmp_path, request["task_id"]) == "interrupted"
    results = server.tool_results()
    assert any(r.startswith("Interrupting t_") for r in results)
    # the child stops after that step: its model is not asked again
