"""Teams end to end over real HTTP: a lead forms a team with the ``task`` tool, members mail each
other and the lead, share a board, and the lead waits for them (kernos.tasks._teams)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tasks_helpers import messages, system, text_of, user_texts
from tests import _cli

from kernos._app import run_agent
from kernos.runtime import Runtime
from kernos.tasks import TaskStore
from kernos.tasks._team_store import TeamStore
from kernos.testing import FakeOpenAIServer, error, text, tool_call

KERNOS = str(Path(sys.executable).with_name("kernos"))
TEAM_TOOLS = {"team_send", "board_add", "board_list", "board_update"}
LEAD_ONLY = {"team_status", "team_wait"}


def latest_text(request: dict[str, Any]) -> str:
    """The last message that is not a system note (the pydantic-ai engine adds one when the
    lead's team tools arrive mid-run)."""
    said = [m for m in messages(request) if m.get("role") not in ("system", "developer")]
    return text_of(said[-1]) if said else ""


def lead_said(latest: str) -> Callable[[dict[str, Any]], bool]:
    """A ``when=`` for the lead's requests whose latest message contains ``latest``."""

    def match(request: dict[str, Any]) -> bool:
        return "MAIN-AGENT" in system(request) and latest in latest_text(request)

    match.__name__ = f"lead_said({latest!r})"
    return match


def member(job: str, latest: str | None = None) -> Callable[[dict[str, Any]], bool]:
    """A ``when=`` for the requests of the member whose first message carries ``job``,
    optionally whose latest message contains ``latest``."""

    def match(request: dict[str, Any]) -> bool:
        users = [m for m in messages(request) if m.get("role") == "user"]
        if not users or job not in text_of(users[0]):
            return False
        return latest is None or latest in latest_text(request)

    match.__name__ = f"member({job!r}, {latest!r})"
    return match


def spawn(team: str, *names: str, background: bool = True) -> dict[str, Any]:
    return {
        "team": team,
        "category": "quick",
        "run_in_background": background,
        "tasks": [{"prompt": f"{n.upper()}-JOB", "name": n} for n in names],
    }


def rows(runtime: Runtime) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in TaskStore(runtime.store).recent()}


NOTED = text("noted", when=lead_said("task completion"), repeat=True)


async def test_a_team_of_three_mails_broadcasts_revives_and_the_lead_waits(
    runtime: Runtime, server: FakeOpenAIServer
) -> None:
    server.script(
        # the lead forms the team with beta, waits until it is idle, adds alpha and gamma
        tool_call("task", spawn("crew", "beta"), when=lead_said("form the crew")),
        tool_call("team_wait", {"until": "idle"}, when=lead_said("Started task")),
        tool_call("task", spawn("crew", "alpha", "gamma"), when=lead_said("idle or finished")),
        tool_call("team_wait", {"until": "mail"}, when=lead_said("Batch running")),
        tool_call("team_status", {}, when=lead_said("Team mail from beta")),
        tool_call("team_wait", {"until": "idle"}, when=lead_said("Unread mail")),
        text("crew finished", when=lead_said("idle or finished")),
        NOTED,
        # beta finishes at once; alpha's mail revives it, and it reports to the lead
        text("beta first done", when=member("BETA-JOB", "BETA-JOB")),
        tool_call(
            "team_send",
            {"to": "lead", "message": "beta got alpha's mail"},
            when=member("BETA-JOB", "hello beta"),
        ),
        text("beta relayed", when=member("BETA-JOB", " lead")),
        text("beta saw the broadcast", when=member("BETA-JOB", "all hands")),
        # alpha: a mail, an unknown name, a broadcast
        tool_call(
            "team_send", {"to": "beta", "message": "hello beta"}, when=member("ALPHA-JOB", "JOB")
        ),
        tool_call(
            "team_send",
            {"to": "nobody", "message": "anyone?"},
            when=member("ALPHA-JOB", "Delivered to beta"),
        ),
        tool_call(
            "team_send",
            {"to": "*", "message": "all hands on deck"},
            when=member("ALPHA-JOB", "No member"),
        ),
        text("alpha done", when=member("ALPHA-JOB", "gamma")),
        text("gamma done", when=member("GAMMA-JOB", "GAMMA-JOB")),
        text("gamma saw the broadcast", when=member("GAMMA-JOB", "all hands")),
    )
    outcome = await run_agent(runtime, "form the crew")
    assert outcome.ok, outcome.error
    server.assert_all_consumed()
    results = server.tool_results()
    # alpha's mail found beta finished: beta was revived by it
    assert "Delivered to beta; it had finished and starts a new run with it." in results
    unknown = next(r for r in results if r.startswith('No member "nobody"'))
    assert unknown == (
        'No member "nobody" in team crew; nothing was sent. Members: beta, gamma; '
        'or "lead", or "*" for every other member.'
    )
    broadcast = next(r for r in results if "for gamma" in r or "to gamma" in r)
    assert len(broadcast.splitlines()) == 2 and "beta" in broadcast  # every other member
    # the mail is a user message naming its sender, read once
    beta_in = user_texts(server, "QUICK-WORKER")
    hello = [t for t in beta_in if "hello beta" in t]
    assert hello == ["Team mail from alpha (team crew):\nhello beta"]
    # (beta and gamma each answered the broadcast: every scripted reply was used)
    # the lead's team_wait(until="mail") returned beta's mail
    waited = next(r for r in results if r.startswith("Team mail from beta"))
    assert "beta got alpha's mail" in waited
    status = next(r for r in results if r.startswith("Team crew:"))
    assert "- beta t_" in status and "Unread mail for you: 0." in status
    team = rows(runtime)
    assert {team[n]["status"] for n in ("alpha", "beta", "gamma")} == {"completed"}
    assert team["beta"]["run_epoch"] >= 2
    # members get the member tools and the hidden guidance; the lead gets the team tools
    first_alpha = next(r for r in server.requests if member("ALPHA-JOB")(r))
    offered = {t["function"]["name"] for t in first_alpha["tools"]}
    assert offered >= TEAM_TOOLS and not offered & (LEAD_ONLY | {"task"})
    opening = text_of(next(m for m in messages(first_alpha) if m.get("role") == "user"))
    assert "You are alpha, a member of team crew" in opening
    assert "end your turn" in opening
    lead_later = next(r for r in server.requests if lead_said("Started task")(r))
    assert {t["function"]["name"] for t in lead_later["tools"]} >= TEAM_TOOLS | LEAD_ONLY
    # every message is stored once and read once
    store = TeamStore(runtime.store)
    ((lead, name),) = store.teams()
    assert name == "crew"
    mail = store.mail(lead, "crew")
    assert len(mail) == 4  # alpha → beta, alpha → * (beta, gamma), beta → lead
    assert all(m["taken_by"] for m in mail)


async def test_team_rules_name_required_and_unique(
    runtime: Runtime, server: FakeOpenAIServer
) -> None:
    nameless = {"team": "crew", "category": "quick", "prompt": "X-JOB"}
    twice = spawn("crew", "dup", "dup")
    server.script(
        tool_call("task", nameless, when=lead_said("go")),
        tool_call("task", twice, when=lead_said("no name")),
        tool_call("task", spawn("crew", "lead"), when=lead_said("twice")),
        text("ok", when=lead_said("reserved")),
    )
    outcome = await run_agent(runtime, "go")
    assert outcome.ok, outcome.error
    server.assert_all_consumed()
    first, second, third = server.tool_results()
    assert first.startswith("the child joins team crew but has no name")
    assert second.startswith('The name "dup" is already used (twice in this call)')
    assert third.startswith('"lead" is reserved in team mail')
    assert TaskStore(runtime.store).recent() == []


async def test_a_claim_race_has_one_winner_and_the_loser_is_told_who(
    runtime: Runtime, server: FakeOpenAIServer
) -> None:
    claim = {"id": 1, "status": "claimed"}
    server.script(
        # a foreground scout puts the item on the board; then two members race for it
        tool_call("task", spawn("duo", "scout", background=False), when=lead_said("race")),
        tool_call("board_add", {"title": "fix the parser"}, when=member("SCOUT-JOB", "JOB")),
        text("scout done", when=member("SCOUT-JOB", "Added board item 1")),
        tool_call("task", spawn("duo", "red", "blue"), when=lead_said("scout done")),
        tool_call("board_update", claim, when=member("RED-JOB", "JOB")),
        tool_call("board_update", claim, when=member("BLUE-JOB", "JOB")),
        text("red over", when=member("RED-JOB", "claimed")),
        text("blue over", when=member("BLUE-JOB", "claimed")),
        tool_call("team_wait", {"until": "idle"}, when=lead_said("Batch running")),
        tool_call("board_list", {}, when=lead_said("idle or finished")),
        text("raced", when=lead_said("fix the parser")),
        NOTED,
    )
    outcome = await run_agent(runtime, "race")
    assert outcome.ok, outcome.error
    server.assert_all_consumed()
    results = server.tool_results()
    won = [r for r in results if r.startswith("Updated board item: 1. [claimed by ")]
    lost = [r for r in results if r.startswith("Board item 1 is already claimed by ")]
    assert len(won) == 1 and len(lost) == 1, results
    winner = won[0].removeprefix("Updated board item: 1. [claimed by ").split("]")[0]
    assert winner in ("red", "blue")
    assert lost[0].startswith(f"Board item 1 is already claimed by {winner};")
    store = TeamStore(runtime.store)
    ((lead, _),) = store.teams()
    (item,) = store.board(lead, "duo")
    assert (item["status"], item["owner"], item["created_by"]) == ("claimed", winner, "scout")


async def test_team_wait_times_out_with_a_code_naming_who_still_works(
    runtime: Runtime, server: FakeOpenAIServer
) -> None:
    held = threading.Event()

    def timed_out(request: dict[str, Any]) -> bool:
        if "MAIN-AGENT" in system(request) and "timed out" in latest_text(request):
            held.set()  # now the member may answer
            return True
        return False

    server.script(
        tool_call("task", spawn("slow", "sloth"), when=lead_said("wait")),
        tool_call("team_wait", {"until": "mail", "timeout": 0.2}, when=lead_said("Started")),
        tool_call("team_wait", {"until": "idle"}, when=timed_out),
        text("waited", when=lead_said("idle or finished")),
        text("sloth done", when=member("SLOTH-JOB"), hold=held),
        NOTED,
    )
    outcome = await run_agent(runtime, "wait")
    assert outcome.ok, outcome.error
    server.assert_all_consumed()
    timeout = server.tool_results()[1]
    assert timeout.startswith("team_wait timed out after 0.2s; still working: sloth (t_")


async def test_team_max_turns_stops_two_members_mailing_each_other_forever(
    project: Any, server: FakeOpenAIServer
) -> None:
    from kernos.runtime import load_config

    (project / "kernos.toml").write_text(
        (project / "kernos.toml").read_text() + "team_max_turns = 6\n", encoding="utf-8"
    )
    runtime = Runtime(load_config(cwd=project))
    try:
        server.script(
            tool_call("task", spawn("loop", "ping", "pong"), when=lead_said("loop")),
            tool_call("team_wait", {"until": "idle"}, when=lead_said("Batch")),
            text("stopped", when=lead_said("idle or finished")),
            NOTED,
            tool_call(
                "team_send", {"to": "pong", "message": "ping"}, when=member("PING-JOB"), repeat=True
            ),
            tool_call(
                "team_send", {"to": "ping", "message": "pong"}, when=member("PONG-JOB"), repeat=True
            ),
        )
        outcome = await run_agent(runtime, "loop")
        assert outcome.ok, outcome.error
        member_requests = [r for r in server.requests if "QUICK-WORKER" in json.dumps(r)]
        assert len(member_requests) == 6
        team = rows(runtime)
        assert "error" in {team["ping"]["status"], team["pong"]["status"]}
        errors = [team[n]["error"] or "" for n in ("ping", "pong")]
        assert any("team_max_turns limit of 6" in e for e in errors)
    finally:
        runtime.close()


async def test_a_member_ended_in_error_cannot_receive_and_an_oversized_message_is_refused(
    runtime: Runtime, server: FakeOpenAIServer
) -> None:
    huge = "x" * (32 * 1024 + 1)
    server.script(
        tool_call("task", spawn("pair", "doomed", "fine"), when=lead_said("start")),
        tool_call("team_wait", {"until": "idle"}, when=lead_said("Batch running")),
        tool_call(
            "team_send",
            {"to": "doomed", "message": "still there?"},
            when=lead_said("idle or finished"),
        ),
        tool_call("team_send", {"to": "fine", "message": huge}, when=lead_said("ended")),
        text("understood", when=lead_said("32 KB")),
        NOTED,
        error(400, "bad request", when=member("DOOMED-JOB")),
        text("fine done", when=member("FINE-JOB")),
    )
    outcome = await run_agent(runtime, "start")
    assert outcome.ok, outcome.error
    server.assert_all_consumed()
    results = server.tool_results()
    assert results[2] == "doomed ended error and cannot receive mail; nothing was sent to it."
    assert results[3] == (
        f"The message is {len(huge)} bytes; team mail takes at most 32768 bytes (32 KB). Send a "
        "shorter summary, or put the details on the board."
    )
    store = TeamStore(runtime.store)
    ((lead, _),) = store.teams()
    assert store.mail(lead, "pair") == []  # nothing was stored for either


def kernos(project: Path, server: FakeOpenAIServer, *args: str) -> subprocess.CompletedProcess[str]:
    return _cli.kernos(
        *args,
        cwd=project,
        env={**os.environ, **server.env(), "KERNOS_HOME": str(project / ".kernos")},
        timeout=120,
    )


def test_through_the_cli_teams_show_and_output_carry_the_team_and_its_mail(
    project: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call("task", spawn("pair", "writer", "reader"), when=lead_said("pair")),
        tool_call("team_wait", {"until": "idle"}, when=lead_said("Batch running")),
        tool_call("board_add", {"title": "review the draft"}, when=lead_said("idle or")),
        text("pair done", when=lead_said("Added board item")),
        NOTED,
        tool_call(
            "team_send",
            {"to": "reader", "message": "draft ready"},
            when=member("WRITER-JOB", "JOB"),
        ),
        text("sent", when=member("WRITER-JOB", "reader")),
        text("reader ready", when=member("READER-JOB", "READER-JOB")),
        text("read it", when=member("READER-JOB", "draft ready")),
    )
    ran = kernos(project, server, "run", "work as a pair", "-q")
    assert ran.returncode == 0, ran.stderr
    server.assert_all_consumed()
    listed = kernos(project, server, "teams", "--json")
    assert listed.returncode == 0, listed.stderr
    (team,) = json.loads(listed.stdout)["teams"]
    assert team["team"] == "pair" and team["lead_unread"] == 0
    members = {m["name"]: m for m in team["members"]}
    assert set(members) == {"writer", "reader"}
    assert {m["status"] for m in members.values()} == {"completed"}
    assert [(b["id"], b["status"], b["title"]) for b in team["board"]] == [
        (1, "open", "review the draft")
    ]
    human = kernos(project, server, "teams")
    assert human.stdout.startswith(f"team pair (lead {team['lead_session']}, unread 0)")
    shown = kernos(project, server, "tasks", "show", members["writer"]["task_id"], "--json")
    record = json.loads(shown.stdout)["task"]
    assert (record["team"], record["name"]) == ("pair", "writer")
    # mail out in the sender's transcript, mail in in the recipient's
    out = kernos(project, server, "tasks", "output", members["writer"]["task_id"]).stdout
    assert '[tool_call] team_send {"to": "reader", "message": "draft ready"}' in out
    inbox = kernos(project, server, "tasks", "output", members["reader"]["task_id"]).stdout
    assert "[user] Team mail from writer (team pair):\ndraft ready" in inbox
