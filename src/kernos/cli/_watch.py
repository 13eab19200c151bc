"""``kernos tasks watch``: a live view of the tasks in the store, whichever process writes them.

Each main session is a row with its children below it (and theirs below them): status, model,
executor (when the store records one), elapsed time, tokens in / out from the ``usage`` table and
the cost when genai-prices knows the model (``unknown`` otherwise). The members of a team are
grouped under a row of their team (its lead's unread mail), each with its own unread mail
(:func:`kernos.tasks.group_members`). The store is polled cheaply (a row count and the newest
``updated_at`` / usage id / team mail count, every :data:`POLL_SECONDS`); only a change reads the
rows again.

On a terminal it is a full-screen view (rich ``Live``, plain ANSI, so it works over SSH): ↑/↓ (or
k/j) select a task, ``t`` shows or hides its transcript tail, ``c`` cancels it (the same path as
``kernos tasks cancel``), ``a`` / ``d`` approve / deny a waiting task's approval request (as
``kernos approve`` / ``kernos deny``; ``d`` first asks for an optional one-line reason: enter
sends it, escape goes back), ``q`` or Ctrl-C leaves and restores the terminal. When
stdout is not a terminal it prints the table again each time something changes; ``--once`` prints
one snapshot and exits. ``--json`` prints each snapshot as one JSON document per line::

    {"at": 1767225600.0, "rows": [{"kind": "session" | "team" | "task", "id", "parent",
     "depth", "status", "agent", "model", "executor", "label", "elapsed", "requests",
     "input_tokens", "output_tokens", "cost", "team", "unread"}, ...]}

``elapsed`` is in seconds (``null`` before a task starts); ``cost`` is in USD, ``null`` when
unknown. A ``team`` row's ``id`` is the team's name and its ``unread`` the lead's unread mail; a
member's ``team`` is its team and ``unread`` its unread mail (both ``null`` outside teams).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from kernos.cli._table import count, duration, one_line, table
from kernos.tasks import ACTIVE, group_members

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from kernos.tasks import TaskStore, TeamStore

#: how often the store is checked for changes, in seconds
POLL_SECONDS = 0.5

#: how often the dead owners' tasks are marked ``lost``, in seconds
RECONCILE_SECONDS = 2.0

#: how many transcript lines ``t`` shows
TAIL_LINES = 12


_STATUS_STYLE = {
    "pending": "cyan",
    "running": "yellow",
    "waiting": "bold yellow",
    "completed": "green",
    "error": "red",
    "lost": "red",
    "cancelled": "magenta",
    "interrupted": "magenta",
}

HEADER = ("TASK", "STATUS", "MODEL", "EXECUTOR", "ELAPSED", "IN", "OUT", "COST", "LABEL")


@dataclass(frozen=True)
class Usage:
    """What one session's model responses reported, summed (``cost`` None: a price unknown)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0
    model: str | None = None
    agent: str | None = None

    def plus(self, row: Mapping[str, Any]) -> Usage:
        cost = None if self.cost is None or row.get("cost") is None else self.cost + row["cost"]
        return Usage(
            self.requests + 1,
            self.input_tokens + int(row.get("input_tokens") or 0),
            self.output_tokens + int(row.get("output_tokens") or 0),
            cost,
            row.get("model") or self.model,
            row.get("agent") or self.agent,
        )


_NO_USAGE = Usage()


@dataclass(frozen=True)
class Row:
    """One line of the view: a main session or a task, at its depth in the tree."""

    kind: str
    id: str
    parent: str | None
    depth: int
    status: str
    agent: str
    model: str
    executor: str
    label: str
    elapsed: float | None
    requests: int
    input_tokens: int
    output_tokens: int
    cost: float | None
    team: str | None = None
    unread: int | None = None


@dataclass(frozen=True)
class Seat:
    """A member as the view shows it: its team, its name, its unread mail."""

    team: str
    name: str
    unread: int


def seats_of(teams: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Seat], dict[str, int]]:
    """From :meth:`kernos.tasks.TeamStore.overview`: each member's seat by task id, and the
    lead's unread mail by ``lead session/team``. Pure."""
    seats: dict[str, Seat] = {}
    leads: dict[str, int] = {}
    for team in teams:
        leads[f"{team['lead_session']}/{team['team']}"] = int(team.get("lead_unread") or 0)
        for member in team.get("members", ()):
            seats[member["task_id"]] = Seat(team["team"], member["name"], int(member["unread"]))
    return seats, leads


def _elapsed(task: Mapping[str, Any], now: float) -> float | None:
    started = task.get("started_at")
    if started is None:
        return None
    end = task.get("finished_at")
    if end is None:
        end = now if task.get("status") in ACTIVE else task.get("updated_at") or now
    return max(0.0, float(end) - float(started))


def build_rows(
    tasks: Sequence[Mapping[str, Any]],
    usage: Mapping[str, Usage],
    now: float,
    teams: Sequence[Mapping[str, Any]] = (),
) -> list[Row]:
    """The tree: each main session (newest activity first), its children in the order they were
    created, their children below them; the members of a team under a row of their team, at the
    place of its first member (``teams``: :meth:`kernos.tasks.TeamStore.overview`). A task whose
    parent task is not among ``tasks`` hangs under its parent session. Pure."""
    seats, leads = seats_of(teams)
    by_parent: dict[str, list[Mapping[str, Any]]] = {}
    for task in sorted(tasks, key=lambda t: (t.get("created_at") or 0, t["id"])):
        by_parent.setdefault(task["parent_session"], []).append(task)
    child_sessions = {t["child_session"] for t in tasks if t.get("child_session")}
    roots = [session for session in by_parent if session not in child_sessions]
    latest = {
        session: max((t.get("updated_at") or 0) for t in by_parent[session]) for session in roots
    }
    roots.sort(key=lambda s: (-latest[s], s))
    rows: list[Row] = []
    seen: set[str] = set()

    def add_task(task: Mapping[str, Any], session: str, depth: int) -> None:
        if task["id"] in seen:  # a damaged store could make a cycle
            return
        seen.add(task["id"])
        spent = usage.get(task.get("child_session") or "", _NO_USAGE)
        seat = seats.get(task["id"])
        label = str(task.get("name") or task.get("label") or "")
        rows.append(
            Row(
                kind="task",
                id=task["id"],
                parent=session,
                depth=depth,
                status=str(task.get("status") or ""),
                agent=str(task.get("target") or ""),
                model=str(task.get("model") or ""),
                executor=str(task.get("executor") or ""),
                label=f"{label} · {seat.unread} unread" if seat is not None else label,
                elapsed=_elapsed(task, now),
                requests=spent.requests,
                input_tokens=spent.input_tokens,
                output_tokens=spent.output_tokens,
                cost=spent.cost,
                team=seat.team if seat is not None else None,
                unread=seat.unread if seat is not None else None,
            )
        )
        if task.get("child_session"):
            add_children(task["child_session"], depth + 1)

    def add_children(session: str, depth: int) -> None:
        children = {task["id"]: task for task in by_parent.get(session, ())}
        member_of = {tid: seats[tid].team for tid in children if tid in seats}
        for team, ids in group_members(list(children), member_of):
            if team is None:
                add_task(children[ids[0]], session, depth)
                continue
            unread = leads.get(f"{session}/{team}", 0)
            working = sum(1 for tid in ids if children[tid].get("status") in ACTIVE)
            rows.append(
                Row(
                    kind="team",
                    id=team,
                    parent=session,
                    depth=depth,
                    status=f"{working} active" if working else "idle",
                    agent="",
                    model="",
                    executor="",
                    label=f"team {team} · {len(ids)} members · lead {unread} unread",
                    elapsed=None,
                    requests=0,
                    input_tokens=0,
                    output_tokens=0,
                    cost=None,
                    team=team,
                    unread=unread,
                )
            )
            for task_id in ids:
                add_task(children[task_id], session, depth + 1)

    for session in roots:
        spent = usage.get(session, _NO_USAGE)
        rows.append(
            Row(
                kind="session",
                id=session,
                parent=None,
                depth=0,
                status="",
                agent=spent.agent or "",
                model=spent.model or "",
                executor="",
                label=f"session ({spent.agent})" if spent.agent else "session",
                elapsed=None,
                requests=spent.requests,
                input_tokens=spent.input_tokens,
                output_tokens=spent.output_tokens,
                cost=spent.cost,
            )
        )
        add_children(session, 1)
    return rows


def cost_cell(row: Row) -> str:
    """``-`` before any model response, ``unknown`` when a price is not known, else dollars."""
    if not row.requests:
        return "-"
    return "unknown" if row.cost is None else f"${row.cost:.4f}"


def cells(row: Row) -> tuple[str, ...]:
    """A row as the text of each column (the tree drawn by indentation). Pure."""
    tree = "" if row.depth == 0 else "  " * (row.depth - 1) + "└ "
    return (
        tree + row.id,
        row.status or "-",
        row.model or "-",
        row.executor,
        "-" if row.elapsed is None else duration(row.elapsed),
        count(row.input_tokens) if row.requests else "-",
        count(row.output_tokens) if row.requests else "-",
        cost_cell(row),
        one_line(row.label, 60),
    )


def plain(rows: Sequence[Row]) -> str:
    """The snapshot as an aligned text table (what a pipe or a file gets)."""
    if not rows:
        return "(no tasks)"
    return table(HEADER, [cells(row) for row in rows])


def document(rows: Sequence[Row], now: float) -> dict[str, Any]:
    """The snapshot as its ``--json`` document."""
    return {"at": now, "rows": [asdict(row) for row in rows]}


def signature(rows: Sequence[Row]) -> tuple[tuple[Any, ...], ...]:
    """What a plain refresh compares: everything but the elapsed times (a clock is no change)."""
    return tuple(
        (r.kind, r.id, r.status, r.model, r.executor, r.label, r.requests, r.input_tokens,
         r.output_tokens, r.unread)
        for r in rows
    )  # fmt: skip


# -- reading the store -------------------------------------------------------------------------


class Source:
    """The store as the view reads it: a cheap change check, then the rows and usage sums."""

    def __init__(self, store: TaskStore, limit: int) -> None:
        from kernos.tasks import TeamStore

        self.tasks = store
        self.teams: TeamStore = TeamStore(store.store)
        self.limit = limit
        self._usage: dict[str, Usage] = {}
        self._usage_seen = 0
        self._mark: tuple[Any, ...] | None = None
        self._rows: list[dict[str, Any]] = []
        self._teams: list[dict[str, Any]] = []
        self._reconciled = 0.0

    def mark(self) -> tuple[Any, ...]:
        """A few numbers that change whenever a task row, a usage row or team mail does."""
        return (*self.tasks.watch_mark(), *self.teams.mail_mark())

    def poll(self, now: float) -> bool:
        """Read again if anything changed; ``True`` when it did."""
        if now - self._reconciled >= RECONCILE_SECONDS:
            self._reconciled = now
            self.tasks.reconcile()  # a dead owner's task shows ``lost``, not running forever
        mark = self.mark()
        if mark == self._mark:
            return False
        self._mark = mark
        self._rows = self.tasks.recent(self.limit)
        self._teams = self.teams.overview()
        self._read_usage()
        return True

    def _read_usage(self) -> None:
        from kernos.cli._usage_store import with_cost

        for entry in self.tasks.usage_after(self._usage_seen):
            row = with_cost(entry)
            self._usage[row["session_id"]] = self._usage.get(row["session_id"], _NO_USAGE).plus(row)
            self._usage_seen = max(self._usage_seen, int(row["id"]))

    def rows(self, now: float) -> list[Row]:
        return build_rows(self._rows, self._usage, now, self._teams)

    def last_seq(self, task_id: str) -> int:
        return self.tasks.last_seq(task_id)

    def tail(self, task_id: str, lines: int) -> list[str]:
        return self.tasks.transcript(task_id)[-lines:]

    def cancel(self, task_id: str) -> str:
        """What ``kernos tasks cancel`` does, and its one-line answer."""
        _, message = self.tasks.cancel(task_id)
        return message

    def answer(self, task_id: str, approved: bool, reason: str | None = None) -> str:
        """What ``kernos approve`` / ``kernos deny`` do to the task's open request, in one line."""
        import getpass

        from kernos.runtime import ApprovalStore

        how = "kernos tasks watch"
        return ApprovalStore(self.tasks.store).answer_task(
            task_id, approved, by=getpass.getuser(), how=how, reason=reason
        )


# -- the entry point ---------------------------------------------------------------------------


class _Stop(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def watch(
    store: TaskStore,
    *,
    once: bool = False,
    as_json: bool = False,
    limit: int = 100,
    write: Callable[[str], None],
) -> int:
    """Run the view until ``q`` / Ctrl-C (or, with ``once``, print one snapshot); the exit code.

    Ctrl-C is 130 and SIGTERM 143, like every kernos command; ``q`` is 0.
    """
    source = Source(store, limit)
    # a signal is noted, and the loop ends at its next turn: raised at any point, it could land
    # inside a store write (a lock taken and never released) and hang the store's close
    signalled: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        signalled.append(128 + signum)

    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    for number in previous:
        signal.signal(number, on_signal)
    try:
        if once:
            now = time.time()
            source.poll(now)
            rows = source.rows(now)
            write(json.dumps(document(rows, now)) if as_json else plain(rows))
            return 0
        if as_json or not sys.stdout.isatty():
            return _refreshing(source, as_json, write, signalled)
        return _Screen(source).run(signalled)
    except KeyboardInterrupt:
        return 130
    except _Stop as stop:
        return stop.code
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _refreshing(
    source: Source, as_json: bool, write: Callable[[str], None], signalled: list[int]
) -> int:
    """Not a terminal: the table again (or one JSON line) each time something changed; until a
    signal (its exit code)."""
    shown: tuple[Any, ...] | None = None
    while not signalled:
        now = time.time()
        source.poll(now)
        rows = source.rows(now)
        if signature(rows) != shown:
            if as_json:
                write(json.dumps(document(rows, now)))
            else:
                write(("\n" if shown is not None else "") + plain(rows))
            shown = signature(rows)
        time.sleep(POLL_SECONDS)
    return signalled[0]


# -- the terminal view -------------------------------------------------------------------------


@contextlib.contextmanager
def _keys_unbuffered(fd: int | None) -> Iterator[None]:
    """Keys arrive one by one, unechoed (cbreak: Ctrl-C still interrupts); restored on exit."""
    if fd is None:
        yield
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


#: what ``d`` shows while its reason is typed
REASON_PROMPT = "deny: reason (enter to send, escape to go back): "

_ARROWS = {"\x1b[A": "up", "\x1bOA": "up", "\x1b[B": "down", "\x1bOB": "down"}


def parse_keys(data: str) -> list[str]:
    """Key presses in what the terminal sent: ``up``/``down`` for arrows, else the character.
    Other escape sequences are skipped. Pure."""
    keys: list[str] = []
    index = 0
    while index < len(data):
        if data[index] == "\x1b":
            sequence = data[index : index + 3]
            if sequence in _ARROWS:
                keys.append(_ARROWS[sequence])
                index += 3
                continue
            index += 1  # skip the rest of an unknown CSI sequence
            if index == len(data):  # a lone escape key
                keys.append("escape")
                continue
            if data[index : index + 1] in ("[", "O"):
                index += 1
                while index < len(data) and not ("@" <= data[index] <= "~"):
                    index += 1
                index += 1
            continue
        keys.append(data[index])  # k / j move only outside a reason being typed (_Screen.key)
        index += 1
    return keys


class _Screen:
    """The full-screen view: rows, selection, transcript tail, status line."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.rows: list[Row] = []
        self.selected: str | None = None
        self.tail_open = False
        self.tail: list[str] = []
        self.tail_seq = -1
        self.message = ""
        #: the reason being typed for a ``d`` (``None``: not typing one)
        self.reason: str | None = None

    # -- state ---------------------------------------------------------------------------------
    def _tasks(self) -> list[str]:
        return [r.id for r in self.rows if r.kind == "task"]

    def _keep_selection(self) -> None:
        tasks = self._tasks()
        if self.selected not in tasks:
            self.selected = tasks[0] if tasks else None

    def _move(self, step: int) -> None:
        tasks = self._tasks()
        if not tasks:
            return
        index = tasks.index(self.selected) if self.selected in tasks else 0
        self.selected = tasks[max(0, min(len(tasks) - 1, index + step))]
        self.tail_seq = -1

    def key(self, key: str) -> bool:
        """Act on one key; ``False`` to leave."""
        if self.reason is not None:
            self._type_reason(key)
            return True
        key = {"k": "up", "j": "down"}.get(key, key)
        if key in ("q", "Q"):
            return False
        if key == "up":
            self._move(-1)
        elif key == "down":
            self._move(1)
        elif key in ("t", "T"):
            self.tail_open = not self.tail_open
            self.tail_seq = -1
        elif key in ("c", "C"):
            if self.selected is None:
                self.message = "no task selected"
            else:
                self.message = self.source.cancel(self.selected)
        elif key in ("a", "A", "d", "D"):  # a waiting task's approval request
            if self.selected is None:
                self.message = "no task selected"
            elif key in ("a", "A"):
                self.message = self.source.answer(self.selected, True)
            else:  # a denial carries an optional reason the model reads
                self.reason = ""
                self.message = REASON_PROMPT
        return True

    def _type_reason(self, key: str) -> None:
        """One key of the reason a ``d`` asks for: enter denies, escape goes back."""
        assert self.reason is not None
        if key in ("\r", "\n"):
            reason, self.reason = self.reason.strip(), None
            if self.selected is None:
                self.message = "no task selected"
                return
            self.message = self.source.answer(self.selected, False, reason or None)
            return
        if key == "escape":
            self.reason, self.message = None, "not denied"
            return
        if key in ("\x7f", "\b"):
            self.reason = self.reason[:-1]
        elif len(key) == 1 and key.isprintable():
            self.reason += key
        self.message = REASON_PROMPT + self.reason

    def refresh_tail(self) -> None:
        if not self.tail_open or self.selected is None:
            return
        seq = self.source.last_seq(self.selected)
        if seq != self.tail_seq:
            self.tail_seq = seq
            self.tail = self.source.tail(self.selected, TAIL_LINES)

    # -- drawing -------------------------------------------------------------------------------
    def render(self, console: Console, now: float) -> RenderableType:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        height = console.size.height
        tail_height = TAIL_LINES + 1 if self.tail_open else 0
        room = max(1, height - 4 - tail_height)
        visible = self._window(room)
        running = sum(1 for r in self.rows if r.kind == "task" and r.status in ACTIVE)
        tasks = sum(1 for r in self.rows if r.kind == "task")
        title = Text.assemble(
            ("kernos tasks", "bold"), f" — {tasks} tasks, {running} active", style=""
        )
        grid = Table(box=None, pad_edge=False, show_edge=False, expand=True, header_style="bold")
        for name in HEADER:
            grid.add_column(
                name,
                no_wrap=True,
                overflow="ellipsis",
                ratio=1 if name == "LABEL" else None,
                justify="right" if name in ("ELAPSED", "IN", "OUT", "COST") else "left",
            )
        for row in visible:
            texts = [Text(cell) for cell in cells(row)]
            texts[1].stylize(_STATUS_STYLE.get(row.status, ""))
            style = "reverse" if row.id == self.selected else ("bold" if row.depth == 0 else "")
            grid.add_row(*texts, style=style)
        if not self.rows:
            grid.add_row(Text("(no tasks yet)", "dim"))
        parts: list[RenderableType] = [title, grid]
        if self.tail_open:
            parts.append(Text(f"── transcript of {self.selected or '-'} (last lines)", "dim"))
            lines = self.tail[-TAIL_LINES:] if self.selected else []
            parts.extend(Text(line, no_wrap=True, overflow="ellipsis") for line in lines)
        parts.append(Text(self.message, "bold") if self.message else Text(""))
        keys = "↑/↓ select · t transcript · c cancel · a/d approve/deny · q quit"
        parts.append(Text(keys, "dim"))
        return Group(*parts)

    def _window(self, room: int) -> list[Row]:
        """The rows that fit, scrolled so the selected one shows."""
        if len(self.rows) <= room:
            return self.rows
        at = next((i for i, r in enumerate(self.rows) if r.id == self.selected), 0)
        start = max(0, min(at - room // 2, len(self.rows) - room))
        return self.rows[start : start + room]

    # -- the loop ------------------------------------------------------------------------------
    def run(self, signalled: list[int]) -> int:
        """Until ``q`` (0) or a signal (its exit code)."""
        from rich.console import Console
        from rich.live import Live

        console = Console(highlight=False, markup=False)
        fd = sys.stdin.fileno() if sys.stdin.isatty() else None
        with (
            _keys_unbuffered(fd),
            Live(
                console=console,
                screen=True,
                auto_refresh=False,
                redirect_stdout=False,
                redirect_stderr=False,
            ) as live,
        ):
            drawn = 0.0
            polled = 0.0
            while not signalled:
                now = time.time()
                changed = False
                if now - polled >= POLL_SECONDS:
                    polled = now
                    if self.source.poll(now):
                        self.rows = self.source.rows(now)
                        self._keep_selection()
                        changed = True
                    self.refresh_tail()
                if changed or now - drawn >= 1.0:
                    self.rows = self.source.rows(now)  # elapsed times move on
                    live.update(self.render(console, now), refresh=True)
                    drawn = now
                for key in self._read_keys(fd, POLL_SECONDS / 2):
                    if not self.key(key):
                        return 0
                    self.refresh_tail()
                    live.update(self.render(console, time.time()), refresh=True)
            return signalled[0]

    @staticmethod
    def _read_keys(fd: int | None, timeout: float) -> list[str]:
        if fd is None:
            time.sleep(timeout)
            return []
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return []
        data = os.read(fd, 64)
        if not data:  # the terminal went away
            raise _Stop(0)
        return parse_keys(data.decode("utf-8", errors="replace"))
