"""The task tree as ``kernos tasks watch`` shows it: pure rules over store rows.

Each main session is a row with its children below it (and theirs below them); the members of a
team hang under a row of their team (:func:`kernos.tasks.group_members`). The rows carry what the
view prints and what ``--json`` writes (``cli/_watch_view.py`` renders them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernos.tasks._state import ACTIVE
from kernos.tasks._team_rules import group_members


@dataclass(frozen=True)
class SessionUsage:
    """What one session's model responses reported, summed (``cost`` None: a price unknown)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0
    model: str | None = None
    agent: str | None = None

    def plus(self, row: Mapping[str, Any]) -> SessionUsage:
        cost = None if self.cost is None or row.get("cost") is None else self.cost + row["cost"]
        return SessionUsage(
            self.requests + 1,
            self.input_tokens + int(row.get("input_tokens") or 0),
            self.output_tokens + int(row.get("output_tokens") or 0),
            cost,
            row.get("model") or self.model,
            row.get("agent") or self.agent,
        )


_NO_USAGE = SessionUsage()


@dataclass(frozen=True)
class TreeRow:
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


def task_tree(
    tasks: Sequence[Mapping[str, Any]],
    usage: Mapping[str, SessionUsage],
    now: float,
    teams: Sequence[Mapping[str, Any]] = (),
) -> list[TreeRow]:
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
    rows: list[TreeRow] = []
    seen: set[str] = set()

    def add_task(task: Mapping[str, Any], session: str, depth: int) -> None:
        if task["id"] in seen:  # a damaged store could make a cycle
            return
        seen.add(task["id"])
        spent = usage.get(task.get("child_session") or "", _NO_USAGE)
        seat = seats.get(task["id"])
        label = str(task.get("name") or task.get("label") or "")
        rows.append(
            TreeRow(
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
                TreeRow(
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
            TreeRow(
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


def tree_signature(rows: Sequence[TreeRow]) -> tuple[tuple[Any, ...], ...]:
    """What a plain refresh compares: everything but the elapsed times (a clock is no change)."""
    return tuple(
        (r.kind, r.id, r.status, r.model, r.executor, r.label, r.requests, r.input_tokens,
         r.output_tokens, r.unread)
        for r in rows
    )  # fmt: skip
