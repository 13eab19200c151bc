"""Pure rules of teams: who may join, what a message may be, how board items move."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from kernos.boundary import ToolError
from kernos.tasks._resolve import SpawnItem, clip_shown
from kernos.tasks._state import TaskStatus

#: The most members of one team not yet final (ended in error, cancelled or lost).
MAX_MEMBERS = 16
#: The largest message ``team_send`` takes, in bytes (UTF-8).
MAIL_MAX = 32 * 1024
#: The longest ``timeout`` ``team_wait`` takes, in seconds.
WAIT_MAX = 3600
#: Names a member may not take: they address the lead and everyone.
RESERVED = frozenset({"lead", "*"})
#: A member in one of these states cannot receive mail (the sender is told).
CLOSED = frozenset({TaskStatus.ERROR, TaskStatus.CANCELLED, TaskStatus.LOST})

#: Board statuses and the moves between them.
BOARD_MOVES: dict[str, frozenset[str]] = {
    "open": frozenset({"claimed", "dropped"}),
    "claimed": frozenset({"done", "dropped", "open"}),
    "done": frozenset(),
    "dropped": frozenset({"open"}),
}
BOARD_STATUSES = tuple(BOARD_MOVES)


def check_members(items: Sequence[SpawnItem], members: Mapping[str, str]) -> None:
    """Raise the first rule a ``task`` call's team items break. ``members``: each existing
    team's member names and their status, keyed ``team/name``.

    Raises:
        ToolError: ``team_name_required``, ``team_name_reserved``, ``team_name_taken``,
            ``team_full``.
    """
    added: dict[str, int] = {}
    seen: set[str] = set()
    for index, item in enumerate(items, start=1):
        if item.team is None:
            continue
        where = f"item {index}" if len(items) > 1 else "the child"
        if item.name is None:
            raise ToolError(
                "team_name_required",
                f"{where} joins team {item.team} but has no name; every member needs a `name` "
                "(unique in its team) that the others address mail to. Nothing was spawned.",
            )
        if item.name in RESERVED:
            raise ToolError(
                "team_name_reserved",
                f'"{item.name}" is reserved in team mail ("lead" is you, "*" is everyone); '
                "choose another name. Nothing was spawned.",
            )
        key = f"{item.team}/{item.name}"
        if key in members or key in seen:
            raise ToolError(
                "team_name_taken",
                f'Team {item.team} already has a member named "{item.name}"; choose another '
                "name, or mail that member with team_send. Nothing was spawned.",
            )
        seen.add(key)
        added[item.team] = added.get(item.team, 0) + 1
    for team, count in added.items():
        live = sum(
            1
            for key, status in members.items()
            if key.startswith(team + "/") and status not in CLOSED
        )
        if live + count > MAX_MEMBERS:
            raise ToolError(
                "team_full",
                f"Team {team} may have at most {MAX_MEMBERS} members not yet finished; it has "
                f"{live} and this call adds {count}. Nothing was spawned.",
            )


def check_message(message: str) -> None:
    """Raise ``message_too_large`` past :data:`MAIL_MAX` bytes."""
    size = len(message.encode("utf-8"))
    if size > MAIL_MAX:
        raise ToolError(
            "message_too_large",
            f"The message is {size} bytes; team mail takes at most {MAIL_MAX} bytes (32 KB). "
            "Send a shorter summary, or put the details on the board.",
        )


def unknown_recipient(to: str, names: Iterable[str], team: str) -> ToolError:
    listed = ", ".join(sorted(names)) or "(none)"
    return ToolError(
        "unknown_recipient",
        f'No member "{clip_shown(to)}" in team {team}; nothing was sent. Members: {listed}; '
        'or "lead", or "*" for every other member.',
    )


def board_move(current: str, target: str) -> bool:
    return target in BOARD_MOVES.get(current, frozenset())


def group_members(
    children: Sequence[str], teams: Mapping[str, str]
) -> list[tuple[str | None, list[str]]]:
    """A session's children (task ids, in order) as the watch view shows them: the members of
    each team together, at the place of the team's first member; a child in no team alone.
    ``teams``: the team of each child that is a member. Each entry is ``(team, task ids)``,
    ``(None, [task id])`` for a child in no team."""
    groups: list[tuple[str | None, list[str]]] = []
    at: dict[str, list[str]] = {}
    for task_id in children:
        team = teams.get(task_id)
        if team is None:
            groups.append((None, [task_id]))
        elif team in at:
            at[team].append(task_id)
        else:
            at[team] = [task_id]
            groups.append((team, at[team]))
    return groups
