"""Team mail is exactly-once across a worker SIGKILLed between send and delivery: the message is
stored once (its send key, so the replayed step stores nothing new) and read once (claimed into
the recipient's turn in the transaction that marks it read). On SQLite and on a real PostgreSQL
with the members on different workers (kernos.tasks._teams, kernos.tasks._team_store)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import messages, system, text_of, user_texts
from test_dbos import use_dbos
from test_dbos_inbox import launch, open_store, store_url  # noqa: F401  (a fixture)
from test_dbos_spread import fleet_env, start_workers, wait_share
from tests import _wait as wait
from tests.conftest import Worker

from kernos.tasks import TaskStore, TeamStore
from kernos.testing import FakeOpenAIServer, text, tool_call

pytestmark = pytest.mark.slow

CREW = {
    "team": "crew",
    "subagent_type": "explore",
    "run_in_background": True,
    "tasks": [{"prompt": "ALPHA-JOB", "name": "alpha"}, {"prompt": "BETA-JOB", "name": "beta"}],
}


def member(job: str, latest: str | None = None) -> Callable[[dict[str, Any]], bool]:
    """A ``when=`` for the member whose first message carries ``job`` (and whose latest
    message contains ``latest``)."""

    def match(request: dict[str, Any]) -> bool:
        said = messages(request)
        users = [m for m in said if m.get("role") == "user"]
        if "EXPLORE-AGENT" not in system(request) or not users or job not in text_of(users[0]):
            return False
        return latest is None or latest in text_of(said[-1])

    match.__name__ = f"member({job!r}, {latest!r})"
    return match


def lead(latest: str) -> Callable[[dict[str, Any]], bool]:
    def match(request: dict[str, Any]) -> bool:
        said = messages(request)
        return "MAIN-AGENT" in system(request) and latest in text_of(said[-1])

    match.__name__ = f"lead({latest!r})"
    return match


def after_send(request: dict[str, Any]) -> bool:
    """alpha's request that follows its ``team_send`` (its latest message the tool's answer)."""
    return member("ALPHA-JOB")(request) and messages(request)[-1].get("role") == "tool"


def executor_pid(project: Path, url: str | None, name: str) -> int:
    """The pid of the process running member ``name``, once it runs."""
    store = open_store(project, url)
    try:
        tasks = TaskStore(store)

        def running() -> str | None:
            rows = [r for r in tasks.recent() if r["name"] == name and r["status"] == "running"]
            return str(rows[0]["executor"]) if rows and rows[0]["executor"] else None

        return int(wait.wait_for(running, f"{name} running").rpartition(":")[2])
    finally:
        store.close()


def mail_rows(project: Path, url: str | None, message: str) -> list[dict[str, Any]]:
    store = open_store(project, url)
    try:
        TeamStore(store)  # the tables, before the run makes them
        rows = store.query("SELECT * FROM team_mail WHERE message = ?", (message,))
        return [dict(row) for row in rows]
    finally:
        store.close()


def test_a_worker_killed_between_send_and_delivery_loses_and_doubles_nothing(
    project: Path,
    server: FakeOpenAIServer,
    store_url: str | None,  # noqa: F811  (the fixture)
    procs: list[subprocess.Popen[str]],  # after the store: stopped before it is dropped
    worker: Callable[..., Worker],
) -> None:
    """alpha mails beta while beta's first turn is held, and alpha's worker is killed in alpha's
    next request: the mail is stored, not yet read. alpha's run resumes on another worker (its
    send replayed under its key); beta reads the mail once, after its turn, and reports to the
    lead, which reads that once."""
    use_dbos(project, run_executes="false", on_crash='"resume"', heartbeat="0.5")
    config = project / "kernos.toml"
    config.write_text(config.read_text().replace("concurrency = 5", "concurrency = 2"))
    alpha_gate, beta_gate = threading.Event(), threading.Event()
    server.script(
        tool_call("task", CREW, when=lead("form the crew")),
        tool_call("team_wait", {"until": "mail", "timeout": 600}, when=lead("Batch running")),
        text("crew reported", when=lead("Team mail from beta")),
        text("noted", when=lead("task completion"), repeat=True),
        tool_call(
            "team_send", {"to": "beta", "message": "hello beta"}, when=member("ALPHA-JOB", "JOB")
        ),
        text("alpha done", when=member("ALPHA-JOB", "beta"), hold=alpha_gate, repeat=True),
        text("beta first", when=member("BETA-JOB", "BETA-JOB"), hold=beta_gate, repeat=True),
        tool_call(
            "team_send",
            {"to": "lead", "message": "beta got hello"},
            when=member("BETA-JOB", "hello beta"),
        ),
        text("beta relayed", when=member("BETA-JOB", "lead"), repeat=True),
    )
    workers = start_workers(project, fleet_env(project, server, store_url), 2, worker)
    if store_url is not None:  # each up, then the queue's limit of 2 shared between them: 1 each
        wait_share(store_url, 1)
    run = launch(project, server, store_url, "run", "form the crew", "-q")
    procs.append(run)
    try:
        alpha_pid = executor_pid(project, store_url, "alpha")
        beta_pid = executor_pid(project, store_url, "beta")
        if store_url is not None:
            assert alpha_pid != beta_pid, "the members ran on one worker"
        # alpha's send committed and alpha asks the model again (held): kill its worker now
        wait.wait_for(lambda: mail_rows(project, store_url, "hello beta"), "alpha's mail")
        wait.wait_for(
            lambda: any(after_send(r) for r in server.requests), "alpha's request after its send"
        )
        (doomed,) = [w for w in workers if w.pid == alpha_pid]
        doomed.kill()
        (unread,) = mail_rows(project, store_url, "hello beta")
        assert unread["taken_by"] is None  # sent, not delivered
        worker(project, fleet_env(project, server, store_url))  # the resumer
    finally:
        alpha_gate.set()
        beta_gate.set()
    _, errors = run.communicate(timeout=300)
    assert run.returncode == 0, errors
    (stored,) = mail_rows(project, store_url, "hello beta")  # stored once
    assert stored["taken_by"] is not None  # and read
    store = open_store(project, store_url)
    try:
        tasks = {row["name"]: row for row in TaskStore(store).recent()}
        assert tasks["alpha"]["executor"].rpartition(":")[2] != str(alpha_pid)  # resumed
        beta_turns = [t["text"] for t in store.turns(tasks["beta"]["child_session"])]
        teams = TeamStore(store)
        ((lead_session, team),) = teams.teams()
        counted = teams.requests(lead_session, team)
    finally:
        store.close()
    assert sum("hello beta" in turn for turn in beta_turns) == 1  # delivered once
    read = [t for t in server.tool_results() if "Team mail from beta" in t]
    unasked = [t for t in user_texts(server, "MAIN-AGENT") if "beta got hello" in t]
    assert (len(read), unasked) == (1, [])  # the lead's team_wait read it, once
    # alpha: its first request (the send), "alpha done"; beta: its first turn, the send to
    # the lead, "beta relayed"
    # toward team_max_turns: each request once, the replayed ones (alpha's first, answered from
    # its record; the one in flight at the kill, asked again) not again
    assert counted == 5, counted


@pytest.mark.postgres
def test_mail_revives_a_finished_member_whose_worker_died_on_the_other_worker(
    project: Path,
    server: FakeOpenAIServer,
    fresh_postgres_url: str,
    procs: list[subprocess.Popen[str]],  # after the store: stopped before it is dropped
    worker: Callable[..., Worker],
) -> None:
    """beta finishes on its worker, which is then killed; alpha, on the other worker, mails it
    while the lead waits for mail in ``team_wait``: the lead's process revives beta with the
    mail (alpha's worker does not follow beta), on the surviving worker, and beta answers."""
    url = fresh_postgres_url
    use_dbos(project, run_executes="false", on_crash='"resume"', heartbeat="0.5")
    config = project / "kernos.toml"
    config.write_text(config.read_text().replace("concurrency = 5", "concurrency = 2"))
    alpha_gate = threading.Event()
    server.script(
        tool_call("task", CREW, when=lead("form the crew")),
        tool_call("team_wait", {"until": "mail", "timeout": 600}, when=lead("Batch running")),
        text("crew reported", when=lead("Team mail from beta")),
        text("noted", when=lead("task completion"), repeat=True),
        text("beta idle", when=member("BETA-JOB", "BETA-JOB")),
        tool_call(
            "team_send",
            {"to": "beta", "message": "wake up beta"},
            when=member("ALPHA-JOB", "JOB"),
            hold=alpha_gate,
        ),
        text("alpha done", when=member("ALPHA-JOB", "beta")),
        tool_call(
            "team_send",
            {"to": "lead", "message": "beta is awake"},
            when=member("BETA-JOB", "wake up beta"),
        ),
        text("beta relayed", when=member("BETA-JOB", "lead")),
    )
    workers = start_workers(project, fleet_env(project, server, url), 2, worker)
    wait_share(url, 1)
    run = launch(project, server, url, "run", "form the crew", "-q")
    procs.append(run)
    try:
        alpha_pid = executor_pid(project, url, "alpha")
        store = open_store(project, url)
        try:
            tasks = TaskStore(store)
            done = wait.wait_for(
                lambda: [r for r in tasks.recent() if r["status"] == "completed"], "beta finished"
            )
        finally:
            store.close()
        beta_pid = int(done[0]["executor"].rpartition(":")[2])
        assert (done[0]["name"], beta_pid != alpha_pid) == ("beta", True)
        (doomed,) = [w for w in workers if w.pid == beta_pid]
        doomed.kill()
    finally:
        alpha_gate.set()
    _, errors = run.communicate(timeout=300)
    assert run.returncode == 0, errors
    (mail,) = mail_rows(project, url, "wake up beta")
    assert mail["taken_by"] is not None
    store = open_store(project, url)
    try:
        beta = {row["name"]: row for row in TaskStore(store).recent()}["beta"]
        turns = [t["text"] for t in store.turns(beta["child_session"])]
    finally:
        store.close()
    assert beta["executor"].rpartition(":")[2] == str(alpha_pid)  # the survivor ran it
    assert beta["run_epoch"] == 2 and sum("wake up beta" in t for t in turns) == 1
    assert [t for t in server.tool_results() if "Team mail from beta" in t]  # the lead read it
