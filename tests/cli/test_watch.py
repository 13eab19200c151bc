"""``kernos tasks watch``: a live view of the store, tested on a real pseudo-terminal
while a ``kernos run`` in another process drives a child against the local model server."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import termios
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernos.cli._watch_keys import REASON_PROMPT, Answer, Cancel, Keys, Quit, parse_keys
from kernos.cli._watch_view import cells, plain
from kernos.runtime import Store
from kernos.tasks import SessionUsage, TeamStore, TreeRow, task_tree, tree_signature
from kernos.testing import FakeOpenAIServer, text, tool_call
from tests import _cli
from tests._agents import SPAWN, agent_is
from tests._wait import wait_for
from tests.cli import _pty
from tests.cli._pty import environment
from tests.conftest import KERNOS

DEADLINE = 60.0


def statuses(home: Path) -> list[str]:
    try:
        with sqlite3.connect(home / "kernos.db") as db:
            return [row[0] for row in db.execute("SELECT status FROM tasks")]
    except sqlite3.OperationalError:
        return []


def until(check: Callable[[], bool], what: str, proc: subprocess.Popen[Any] | None = None) -> None:
    wait_for(check, what, DEADLINE, alive=[proc] if proc is not None else [])


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal(_pty.Terminal):
    """``kernos tasks watch`` on a pseudo-terminal."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        super().__init__(["tasks", "watch"], cwd, env)

    def screen(self) -> str:
        """The last frame drawn, without escape codes."""
        return _ANSI.sub("", self.written().rsplit("\x1b[H", 1)[-1])

    def line_of(self, key: str) -> str:
        return next((line for line in self.screen().splitlines() if key in line), "")

    def press(self, keys: str) -> None:
        self.type(keys)


@pytest.fixture
def running_child(
    project: Path, server: FakeOpenAIServer, gate: threading.Event
) -> Iterator[subprocess.Popen[str]]:
    """A ``kernos run`` whose background child is running, its answer held until ``gate``."""
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("Three modules found.", when=agent_is("EXPLORE-AGENT"), hold=gate),
        text("All done.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    run = subprocess.Popen(
        [KERNOS, "run", "survey it", "-q"], cwd=project, env=environment(project, server),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        until(lambda: statuses(project / ".kernos") == ["running"], "the child to run", run)
        yield run
    finally:
        gate.set()
        if run.poll() is None:
            run.kill()
        run.communicate()


def task_id(project: Path) -> str:
    with sqlite3.connect(project / ".kernos" / "kernos.db") as db:
        (row,) = db.execute("SELECT id FROM tasks").fetchall()
    return str(row[0])


def test_the_screen_shows_a_child_go_from_running_to_completed(
    project: Path,
    server: FakeOpenAIServer,
    gate: threading.Event,
    running_child: subprocess.Popen[str],
) -> None:
    child = task_id(project)
    terminal = Terminal(project, environment(project, server))
    try:
        # the first frames can be drawn before the size is known: wait for a whole row
        def whole_row() -> bool:
            line = terminal.line_of(child)
            return all(s in line for s in ("└ " + child, "running", "openai-chat:test"))

        until(whole_row, "the running child's whole row on screen", terminal.proc)
        assert "MAIN" not in terminal.screen()  # model text is data, never shown as a prompt
        gate.set()
        until(lambda: "completed" in terminal.line_of(child), "completed on screen", terminal.proc)
        assert "survey" in terminal.screen()  # its label (a narrow first frame may cut it)
        assert running_child.wait(timeout=DEADLINE) == 0
        terminal.press("t")  # the transcript tail of the selected (only) task
        until(lambda: "[assistant] Three modules found." in terminal.screen(), "the transcript")
        terminal.press("q")
        assert terminal.proc.wait(timeout=DEADLINE) == 0
        terminal.reader.join(timeout=5)
        assert terminal.output.endswith(b"\x1b[?25h\x1b[?1049l")  # cursor back, screen restored
        assert termios.tcgetattr(terminal.slave) == terminal.modes  # echo and line mode back
    finally:
        terminal.close()


def test_c_cancels_the_selected_task_and_ctrl_c_leaves(
    project: Path, server: FakeOpenAIServer, running_child: subprocess.Popen[str]
) -> None:
    child = task_id(project)
    terminal = Terminal(project, environment(project, server))
    try:
        until(lambda: "running" in terminal.line_of(child), "running on screen", terminal.proc)
        terminal.press("c")
        until(lambda: "cancel requested for " + child in terminal.screen(), "the answer")
        until(lambda: "cancelled" in terminal.line_of(child), "cancelled on screen", terminal.proc)
        assert statuses(project / ".kernos") == ["cancelled"]
        assert running_child.wait(timeout=DEADLINE) == 0  # the run was not waiting for it
        terminal.press("\x03")  # Ctrl-C
        assert terminal.proc.wait(timeout=DEADLINE) == 130
        terminal.reader.join(timeout=5)
        assert terminal.output.endswith(b"\x1b[?25h\x1b[?1049l")
        assert termios.tcgetattr(terminal.slave) == terminal.modes
    finally:
        terminal.close()


def test_not_a_terminal_prints_the_table_again_when_it_changes(
    project: Path,
    server: FakeOpenAIServer,
    gate: threading.Event,
    running_child: subprocess.Popen[str],
) -> None:
    child = task_id(project)
    watcher = subprocess.Popen(
        [KERNOS, "tasks", "watch"], cwd=project, env=environment(project, server),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []

    def read() -> None:
        assert watcher.stdout is not None
        lines.extend(iter(watcher.stdout.readline, ""))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        until(lambda: any(child in li and "running" in li for li in lines), "running", watcher)
        gate.set()
        until(lambda: any(child in li and "completed" in li for li in lines), "completed", watcher)
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=DEADLINE) == 130
    finally:
        if watcher.poll() is None:
            watcher.kill()
        watcher.wait()
        reader.join(timeout=5)
        for pipe in (watcher.stdout, watcher.stderr):
            if pipe is not None:
                pipe.close()
    assert lines[0].split() == [
        "TASK", "STATUS", "MODEL", "EXECUTOR", "ELAPSED", "IN", "OUT", "COST", "LABEL",
    ]  # fmt: skip
    assert "\x1b" not in "".join(lines)  # a pipe gets plain text
    headers = [i for i, line in enumerate(lines) if line.startswith("TASK ")]
    assert len(headers) >= 2  # printed again after the change, not every poll
    assert lines[headers[1] - 1] == "\n"


def test_once_prints_one_snapshot_with_tokens_and_cost(
    project: Path, server: FakeOpenAIServer
) -> None:
    spawn = {"prompt": "Survey.", "subagent_type": "explore", "name": "survey"}
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "survey it")),
        text("Found three modules.", when=agent_is("EXPLORE-AGENT")),
        text("Done.", when=agent_is("MAIN-AGENT", "three modules")),
    )
    env = environment(project, server)
    run = _cli.kernos("run", "survey it", "-q", cwd=project, env=env, timeout=DEADLINE)
    assert run.returncode == 0, run.stderr
    with sqlite3.connect(project / ".kernos" / "kernos.db") as db:
        spent = dict(
            db.execute(
                "SELECT t.id, SUM(u.input_tokens) || '/' || SUM(u.output_tokens) FROM usage u"
                " JOIN tasks t ON t.child_session = u.session_id GROUP BY t.id"
            ).fetchall()
        )
    (child,) = spent
    once = _cli.kernos("tasks", "watch", "--once", cwd=project, env=env, timeout=DEADLINE)
    assert once.returncode == 0, once.stderr
    header, session, task = once.stdout.splitlines()
    assert header.split()[0] == "TASK"
    assert session.startswith("s_") and session.endswith("session (main)")
    fields = task.split()
    assert fields[:4] == ["└", child, "completed", "openai-chat:test"]
    with sqlite3.connect(project / ".kernos" / "kernos.db") as db:
        (executor,) = db.execute("SELECT executor FROM tasks WHERE id = ?", (child,)).fetchone()
    assert executor and fields.pop(4) == executor  # the process that ran it (host:pid)
    assert f"{fields[5]}/{fields[6]}" == spent[child]
    assert fields[7:] == ["unknown", "survey"]  # genai-prices does not know model "test"

    as_json = _cli.kernos(
        "tasks", "watch", "--once", "--json", cwd=project, env=env, timeout=DEADLINE
    )
    (document,) = [json.loads(line) for line in as_json.stdout.splitlines()]
    root, row = document["rows"]
    assert (root["kind"], root["depth"], root["agent"]) == ("session", 0, "main")
    assert row["kind"] == "task" and row["parent"] == root["id"] and row["cost"] is None
    assert f"{row['input_tokens']}/{row['output_tokens']}" == spent[child]
    assert sorted(row) == sorted(
        ["kind", "id", "parent", "depth", "status", "agent", "model", "executor", "label",
         "elapsed", "requests", "input_tokens", "output_tokens", "cost", "team", "unread"]
    )  # fmt: skip
    assert (row["team"], row["unread"]) == (None, None)  # a child in no team


def test_once_groups_members_under_their_team_with_unread_counts(
    project: Path, server: FakeOpenAIServer
) -> None:
    crew = {"team": "crew", "subagent_type": "explore", "run_in_background": False,
            "tasks": [{"prompt": "ALPHA-JOB", "name": "alpha"},
                      {"prompt": "BETA-JOB", "name": "beta"}]}  # fmt: skip
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT", "form a crew")),
        tool_call("task", crew, when=agent_is("MAIN-AGENT", "Started task")),
        text("alpha done", when=agent_is("EXPLORE-AGENT", "ALPHA-JOB")),
        text("beta done", when=agent_is("EXPLORE-AGENT", "BETA-JOB")),
        text("survey done", when=agent_is("EXPLORE-AGENT", "Survey the repository")),
        # anywhere in the request: pydantic-ai adds a note after it when the team tools arrive
        text("Done.", when=lambda r: "MAIN-AGENT" in str(r) and "Batch completed" in str(r)),
        text("Noted.", when=agent_is("MAIN-AGENT", "task completion")),
    )
    env = environment(project, server)
    run = _cli.kernos("run", "form a crew", "-q", cwd=project, env=env, timeout=DEADLINE)
    assert run.returncode == 0, run.stderr
    # mail no one has read yet: two for beta (its run is over), one for the lead
    store = Store.open(project / ".kernos")
    try:
        teams = TeamStore(store)
        ((lead, _),) = teams.teams()
        teams.post(lead, "crew", "alpha", "beta", "first")
        teams.post(lead, "crew", "alpha", "beta", "second")
        teams.post(lead, "crew", "beta", "lead", "for you")
    finally:
        store.close()
    once = _cli.kernos("tasks", "watch", "--once", cwd=project, env=env, timeout=DEADLINE)
    assert once.returncode == 0, once.stderr
    _, _, survey, team, alpha, beta = once.stdout.splitlines()  # header, session
    assert survey.startswith("└ t_") and survey.endswith("survey")  # in no team: alone
    assert team.startswith("└ crew ") and team.split()[2] == "idle"
    assert team.endswith("team crew · 2 members · lead 1 unread")
    assert alpha.startswith("  └ t_") and alpha.endswith("alpha · 0 unread")  # one level down
    assert beta.startswith("  └ t_") and beta.endswith("beta · 2 unread")

    as_json = _cli.kernos(
        "tasks", "watch", "--once", "--json", cwd=project, env=env, timeout=DEADLINE
    )
    (document,) = [json.loads(line) for line in as_json.stdout.splitlines()]
    rows = [(r["kind"], r["depth"], r["team"], r["unread"]) for r in document["rows"]]
    assert rows == [
        ("session", 0, None, None), ("task", 1, None, None), ("team", 1, "crew", 1),
        ("task", 2, "crew", 0), ("task", 2, "crew", 2),
    ]  # fmt: skip


def test_an_empty_store_is_said_plainly(project: Path, server: FakeOpenAIServer) -> None:
    once = _cli.kernos(
        "tasks", "watch", "--once", cwd=project, env=environment(project, server), timeout=DEADLINE
    )
    assert (once.returncode, once.stdout) == (0, "(no tasks)\n")


# -- the rules, without I/O ------------------------------------------------------------------------


def task(task_id: str, parent: str, child: str, created: float, **extra: Any) -> dict[str, Any]:
    return {
        "id": task_id, "parent_session": parent, "child_session": child, "status": "running",
        "target": "explore", "model": "m", "name": None, "label": task_id.upper(),
        "created_at": created, "started_at": created, "finished_at": None,
        "updated_at": created, **extra,
    }  # fmt: skip


def test_the_tree_nests_children_under_their_parents() -> None:
    tasks = [
        task("t_b", "s_main", "s_b", 2.0),
        task("t_a", "s_main", "s_a", 1.0, status="completed", finished_at=4.0),
        task("t_a1", "s_a", "s_a1", 3.0, executor="worker-1"),
        task("t_o", "s_old", "s_o", 0.5, updated_at=0.5),
    ]
    rows = task_tree(tasks, {"s_a": SessionUsage(2, 100, 20, None, "m", "explore")}, now=10.0)
    assert [(r.id, r.depth) for r in rows] == [
        ("s_main", 0), ("t_a", 1), ("t_a1", 2), ("t_b", 1), ("s_old", 0), ("t_o", 1),
    ]  # fmt: skip
    by_id = {r.id: r for r in rows}
    assert cells(by_id["t_a"])[0] == "└ t_a"
    assert cells(by_id["t_a1"])[0] == "  └ t_a1"
    assert by_id["t_a"].elapsed == 3.0  # finished: started → finished
    assert by_id["t_b"].elapsed == 8.0  # running: started → now
    assert cells(by_id["t_a"])[5:8] == ("100", "20", "unknown")
    assert cells(by_id["t_b"])[5:8] == ("-", "-", "-")  # no model response yet
    assert by_id["t_a1"].executor == "worker-1" and by_id["t_b"].executor == ""


def test_a_known_price_is_summed_and_an_unknown_one_spoils_the_sum() -> None:
    known = SessionUsage().plus(
        {"input_tokens": 10, "output_tokens": 2, "cost": 0.25, "model": "a"}
    )
    known = known.plus({"input_tokens": 5, "output_tokens": 1, "cost": 0.5})
    assert (known.requests, known.input_tokens, known.cost, known.model) == (2, 15, 0.75, "a")
    assert known.plus({"cost": None}).cost is None
    rows = task_tree([task("t_x", "s", "s_x", 1.0)], {"s_x": known}, now=2.0)
    assert cells(rows[1])[7] == "$0.7500"


def test_a_child_whose_parent_task_is_not_listed_hangs_under_its_session() -> None:
    rows = task_tree([task("t_c", "s_gone", "s_c", 1.0)], {}, now=1.0)
    assert [(r.kind, r.id, r.depth) for r in rows] == [("session", "s_gone", 0), ("task", "t_c", 1)]


def test_members_hang_under_their_team_row_at_the_place_of_the_first() -> None:
    tasks = [
        task("t_a", "s_main", "s_a", 1.0, name="alpha"),
        task("t_x", "s_main", "s_x", 2.0),
        task("t_b", "s_main", "s_b", 3.0, name="beta", status="completed"),
        task("t_b1", "s_b", "s_b1", 4.0),
    ]
    teams = [
        {"team": "crew", "lead_session": "s_main", "lead_unread": 3,
         "members": [{"name": "alpha", "task_id": "t_a", "status": "running", "unread": 1},
                     {"name": "beta", "task_id": "t_b", "status": "completed", "unread": 0}]},
    ]  # fmt: skip
    rows = task_tree(tasks, {}, now=5.0, teams=teams)
    assert [(r.kind, r.id, r.depth, r.unread) for r in rows] == [
        ("session", "s_main", 0, None), ("team", "crew", 1, 3), ("task", "t_a", 2, 1),
        ("task", "t_b", 2, 0), ("task", "t_b1", 3, None), ("task", "t_x", 1, None),
    ]  # fmt: skip
    by_id = {r.id: r for r in rows}
    assert cells(by_id["crew"])[:2] == ("└ crew", "1 active")
    assert by_id["t_a"].label == "alpha · 1 unread"
    assert cells(by_id["t_b1"])[0] == "    └ t_b1"
    # a read message is a change to show
    fewer = [{**teams[0], "lead_unread": 2}]
    assert tree_signature(rows) != tree_signature(task_tree(tasks, {}, now=5.0, teams=fewer))


def test_keys_and_arrows_are_parsed() -> None:
    assert parse_keys("\x1b[A\x1b[Bjkq") == ["up", "down", "j", "k", "q"]  # j/k: Keys.press
    assert parse_keys("\x1b") == ["escape"]
    assert parse_keys("\x1bOA") == ["up"]
    assert parse_keys("\x1b[1;5Ct") == ["t"]  # an unknown sequence is skipped whole


def test_keys_decide_what_reaches_the_store_and_move_the_selection() -> None:
    keys = Keys()
    assert keys.press("c") is None and keys.message == "no task selected"
    keys.rows = task_tree([task("t_a", "s", "s_a", 1.0), task("t_b", "s", "s_b", 2.0)], {}, now=3.0)
    keys.keep_selection()
    assert keys.selected == "t_a"  # the first task, not the session row
    assert keys.press("j") is None and keys.selected == "t_b"
    assert keys.press("down") is None and keys.selected == "t_b"  # stops at the last
    assert keys.press("k") is None and keys.selected == "t_a"
    assert keys.press("t") is None and keys.tail_open
    assert keys.press("C") == Cancel("t_a")
    assert keys.press("a") == Answer("t_a", True)
    assert keys.press("d") is None and keys.message == REASON_PROMPT
    for key in "no q":  # q is typed into the reason, it does not leave
        assert keys.press(key) is None
    assert keys.press("\n") == Answer("t_a", False, "no q")
    assert keys.press("d") is None and keys.press("\r") == Answer("t_a", False, None)
    assert keys.press("q") == Quit()


def test_a_refresh_is_a_change_of_data_not_of_the_clock() -> None:
    early = task_tree([task("t_x", "s", "s_x", 1.0)], {}, now=2.0)
    later = task_tree([task("t_x", "s", "s_x", 1.0)], {}, now=50.0)
    done = task_tree([task("t_x", "s", "s_x", 1.0, status="completed")], {}, now=50.0)
    assert tree_signature(early) == tree_signature(later) != tree_signature(done)
    assert plain([]) == "(no tasks)"
    assert isinstance(early[0], TreeRow)


def test_the_view_reads_again_when_team_mail_is_sent_or_read(tmp_path: Path) -> None:
    from kernos.cli._watch import Source
    from kernos.tasks import TaskStore

    store = Store.open(tmp_path)
    try:
        tasks, teams = TaskStore(store), TeamStore(store)
        source = Source(tasks, 100)
        assert source.poll(1.0) is True  # the first look reads
        assert source.poll(1.1) is False  # nothing changed
        teams.join("s_lead", "crew", "alpha", "t_a")
        assert source.poll(1.2) is True  # a member joined
        teams.post("s_lead", "crew", "lead", "alpha", "hello")
        assert source.poll(1.3) is True  # mail sent: an unread count moved
        assert source.poll(1.4) is False
        assert teams.take("s_lead", "crew", "alpha", "k1") == [("lead", "hello")]
        assert source.poll(1.5) is True  # and read
    finally:
        store.close()
