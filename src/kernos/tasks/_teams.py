"""Teams: named children of one lead that mail each other and share a board.

The lead forms a team with the ``task`` tool (``team`` and ``name`` on its items). Members get
``team_send`` and the board tools; the lead gets those and ``team_status`` / ``team_wait``. Mail
is durable (:class:`kernos.tasks._team_store.TeamStore`): stored once, read once, injected into
the recipient's next turn as a user message naming the sender; a finished member is revived by
it as ``task_send`` revives a child. The model requests of all members of one team together are
bounded by ``[tasks] team_max_turns``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from kernos.boundary import ToolContext, ToolError, ToolSpec
from kernos.runtime import BudgetExceeded, BudgetMeter, Session
from kernos.tasks._prompts import prompt_text
from kernos.tasks._resolve import SpawnItem, clip_shown
from kernos.tasks._state import ACTIVE, Residency, TaskStatus
from kernos.tasks._team_args import (
    BoardAddArgs,
    BoardListArgs,
    BoardUpdateArgs,
    Seat,
    TeamSendArgs,
    TeamStatusArgs,
    TeamWaitArgs,
    prepare_team_args,
)
from kernos.tasks._team_rules import (
    BOARD_STATUSES,
    CLOSED,
    WAIT_MAX,
    board_move,
    check_members,
    check_message,
    unknown_recipient,
)
from kernos.tasks._team_store import LEAD, TeamStore

if TYPE_CHECKING:
    from kernos.runtime import Config, Runtime
    from kernos.tasks._engine import TaskEngine
    from kernos.tasks._record import TaskRecord

#: the tools a member gets, and the lead's (in the order they are added)
MEMBER_TOOLS = ("team_send", "board_add", "board_list", "board_update")
LEAD_TOOLS = ("team_send", "team_status", "team_wait", "board_add", "board_list", "board_update")


class TeamMeter(BudgetMeter):
    """A member's budget meter that also counts its request against its team's bound."""

    def __init__(self, inner: BudgetMeter, teams: Teams, seat: Seat, run: str) -> None:
        super().__init__(inner.budget, inner.requests, inner.tokens, inner.seen)
        self.teams = teams
        self.seat = seat
        #: the run's key and its requests so far: a replayed run makes the same requests in the
        #: same order, so each request's key is the same on every replay
        self.run = run
        self.made = 0

    def before_request(self) -> None:
        self.made += 1
        self.teams.count_request(self.seat, f"{self.run}:{self.made}")
        super().before_request()


class TeamHost(Protocol):
    """What teams use of the manager that holds them (``TaskManager``), declared here so
    this module does not import the manager that imports it."""

    runtime: Runtime
    config: Config
    records: dict[str, TaskRecord]

    @property
    def engine(self) -> TaskEngine: ...

    def revive(self, record: TaskRecord, message: str) -> bool: ...

    def wake(self) -> None: ...

    def change_event(self) -> asyncio.Event: ...


class Teams:
    """The teams of one task manager's sessions: membership, mail delivery, the board."""

    def __init__(self, manager: TeamHost) -> None:
        self.manager = manager
        self.store = TeamStore(manager.runtime.store)
        #: each child's seat (``None``: no team), by task id, so the hot path of a child's turn
        #: asks the store at most once (a child rebuilt here from the store, as on a worker)
        self.seats: dict[str, Seat | None] = {}
        #: the lead sessions of this process, by session id
        self.leads: dict[str, Session] = {}
        #: model requests made by each team's members in this process, by (lead, team)
        self.requests: dict[tuple[str, str], int] = {}
        #: leads waiting in ``team_wait(until="mail")``: their mail is left for that wait
        self.mail_waiters: set[str] = set()
        #: leads with mail posted since they last read theirs
        self.lead_mail: set[str] = set()

    # -- forming -------------------------------------------------------------------------------
    def check(self, lead: Session, items: Sequence[SpawnItem]) -> None:
        """The team rules of a ``task`` call (see :func:`check_members`)."""
        teams = {item.team for item in items if item.team is not None}
        if not teams:
            return
        members: dict[str, str] = {}
        for team in teams:
            for row in self.store.members(lead.session_id, team):
                members[f"{team}/{row['name']}"] = row["status"] or "pending"
        check_members(items, members)

    def enlist(self, lead: Session, item: SpawnItem, task_id: str) -> None:
        """``task_id`` joins its item's team (before its session is built, so it gets the
        member tools)."""
        if item.team is None or item.name is None:
            self.seats[task_id] = None
            return
        self.seats[task_id] = Seat(lead.session_id, item.team, item.name)
        self.store.join(lead.session_id, item.team, item.name, task_id)
        self.seat_lead(lead)

    def seat_lead(self, lead: Session) -> None:
        """``lead`` gets the lead's team tools (once): at its first team, or from the start
        when it is an MCP host (``kernos mcp``: a host lists its tools once)."""
        if lead.session_id not in self.leads:
            self.leads[lead.session_id] = lead
            lead.add_tools(self._ruled(lead, self.tools(lead, None, LEAD_TOOLS)))

    def seat(self, task_id: str) -> Seat | None:
        if task_id not in self.seats:
            found = self.store.membership(task_id)
            self.seats[task_id] = Seat(*found) if found is not None else None
        return self.seats[task_id]

    def equip(self, record: TaskRecord, child: Session) -> None:
        """Give a member's session the member tools."""
        seat = self.seat(record.id)
        if seat is not None and "team_send" not in child.tools:
            # steps on the DBOS engine, as a child's other tools: a replayed run answers what
            # its first attempt answered, and a send in flight at a crash keeps its send key
            ruled = self._ruled(child, self.tools(child, seat, MEMBER_TOOLS))
            child.add_tools(self.manager.engine.child_tools(ruled))

    def _ruled(self, session: Session, specs: list[ToolSpec[Any]]) -> list[ToolSpec[Any]]:
        """``specs`` through the permission rules of ``session``'s agent, like any tool."""
        from kernos.runtime import Permissions

        rules = Permissions(self.manager.config, self.manager.runtime.approver)
        return rules.apply(session.agent, specs)

    def guidance(self, record: TaskRecord, names: Sequence[str]) -> str | None:
        """The hidden guidance a member's first message ends with."""
        seat = self.seat(record.id)
        if seat is None:
            return None
        return prompt_text("team_guidance.md").format(
            name=seat.name, team=seat.team, members=", ".join(names)
        )

    def names(self, lead: str, team: str) -> list[str]:
        return [row["name"] for row in self.store.members(lead, team)]

    # -- the team bound ------------------------------------------------------------------------
    def meter(self, record: TaskRecord, session: Session) -> None:
        """Count ``record``'s run against its team's ``team_max_turns`` (set after its budget)."""
        seat = self.seat(record.id)
        if seat is None or not self.manager.config.tasks.team_max_turns:
            return
        from kernos.runtime import Budget

        inner = session.budget or BudgetMeter(Budget(), seen=len(session.history))
        session.budget = TeamMeter(inner, self, seat, f"{record.id}:{record.run_epoch}")

    def count_request(self, seat: Seat, turn: str | None = None) -> None:
        """Count one model request of ``seat``'s team, or raise past ``team_max_turns``: in
        memory on the local engine (every member runs here), in the store on the DBOS engine
        (members run on any worker), once per ``turn`` key (a replayed run's requests were
        counted when first made)."""
        limit = self.manager.config.tasks.team_max_turns
        key = (seat.lead, seat.team)
        if self.manager.engine.replays:
            counted = self.store.count_request(seat.lead, seat.team, limit, turn)
            if counted is None:
                used = self.store.requests(seat.lead, seat.team)
                raise BudgetExceeded(
                    "team_max_turns", str(limit), f"{used} model requests made by team {seat.team}"
                )
            self.requests[key] = counted
            return
        used = self.requests.get(key, 0)
        if limit and used >= limit:
            raise BudgetExceeded(
                "team_max_turns", str(limit), f"{used} model requests made by team {seat.team}"
            )
        self.requests[key] = used + 1

    # -- mail ----------------------------------------------------------------------------------
    def render(self, team: str, mail: Sequence[tuple[str, str]]) -> str:
        return "\n\n".join(
            prompt_text("team_mail.md").format(sender=sender, team=team, message=message)
            for sender, message in mail
        )

    def take(self, record: TaskRecord, ordinal: int) -> str | None:
        """The mail ``record``'s run reads after its prompt number ``ordinal`` (keyed by run
        epoch and ordinal: a replayed run reads the same), as one text; ``None``: none."""
        seat = self.seat(record.id)
        if seat is None:
            return None
        mail = self.store.take(seat.lead, seat.team, seat.name, f"{record.run_epoch}:t{ordinal}")
        return self.render(seat.team, mail) if mail else None

    def _send_key(self) -> str | None:
        return self.manager.engine.send_key()

    async def send(self, seat: Seat, to: str, message: str) -> str:
        check_message(message)
        members = {row["name"]: row for row in self.store.members(seat.lead, seat.team)}
        if to == seat.name:
            raise ToolError("to_self", f'"{to}" is you; send to another member, or "lead".')
        key = self._send_key()
        if to == LEAD:
            return self._to_lead(seat, message, key)
        if to == "*":
            others = [name for name in members if name != seat.name]
            if not others:
                raise ToolError("no_members", f"Team {seat.team} has no other member to mail.")
            lines = []
            for name in others:
                try:
                    lines.append(self._to_member(seat, name, members[name], message, key))
                except ToolError as exc:
                    lines.append(exc.message)
            return "\n".join(lines)
        if to not in members:
            raise unknown_recipient(to, [n for n in members if n != seat.name], seat.team)
        return self._to_member(seat, to, members[to], message, key)

    def _to_lead(self, seat: Seat, message: str, key: str | None) -> str:
        position = self.store.post(seat.lead, seat.team, seat.name, LEAD, message, key)
        lead = self.leads.get(seat.lead)
        self.manager.wake()
        if lead is None:  # the lead runs in another process: it reads the store
            return f"Queued for lead (position {position})."
        if seat.lead in self.mail_waiters:
            return "Delivered to lead."  # its team_wait takes it
        # read at the lead's next turn (:meth:`deliver_lead`), or by a team_wait before it
        self.lead_mail.add(seat.lead)
        if lead.busy:
            return f"Queued for lead (position {position}); it reads it after its current turn."
        return "Delivered to lead."

    def deliver_lead(self, lead: Session) -> bool:
        """Between the lead's turns: its unread mail, claimed now, becomes its next turn;
        ``True`` when there was some."""
        durable = self.manager.engine.replays
        if lead.session_id not in self.lead_mail and not (
            durable and lead.session_id in self.leads
        ):
            return False
        self.lead_mail.discard(lead.session_id)
        if durable:  # members run in other processes: what they sent is read from the store
            self.wake_members(lead)
        texts = []
        for lead_id, team in self.store.teams(lead.session_id):
            mail = self.store.take(lead_id, team, LEAD, "lead:" + secrets.token_hex(8))
            if mail:
                texts.append(self.render(team, mail))
        if texts:
            lead.inject("\n\n".join(texts))
        return bool(texts)

    def wake_members(self, lead: Session) -> None:
        """Revive each finished member of ``lead``'s teams that has unread mail (mail a member
        on another worker sent it, which could not wake it there)."""
        for lead_id, team in self.store.teams(lead.session_id):
            unread = self.store.unread(lead_id, team)
            for row in self.store.members(lead_id, team):
                record = self.manager.records.get(row["task_id"])
                if not unread.get(row["name"]) or record is None or record.status in ACTIVE:
                    continue
                if record.status in CLOSED or record.residency == Residency.DISPOSED:
                    continue
                take_key = f"{record.run_epoch + 1}:r"
                mail = self.store.take(lead_id, team, row["name"], take_key)
                try:
                    revived = bool(mail) and self.manager.revive(record, self.render(team, mail))
                except ToolError:  # the run's max_children: the mail waits, unread
                    revived = False
                if mail and not revived:
                    self.store.untake(lead_id, team, row["name"], take_key)

    def _to_member(
        self, seat: Seat, name: str, row: dict[str, Any], message: str, key: str | None
    ) -> str:
        record = self.manager.records.get(row["task_id"])
        status = record.status if record is not None else TaskStatus(row["status"] or "pending")
        residency = record.residency if record is not None else Residency(row["residency"])
        if status in CLOSED or residency == Residency.DISPOSED:
            raise ToolError(
                "cannot_receive",
                f"{name} ended {status} and cannot receive mail; nothing was sent to it.",
            )
        position = self.store.post(seat.lead, seat.team, seat.name, name, message, key)
        self.manager.wake()
        if status in ACTIVE:
            return f"Queued for {name} (position {position}); it reads it after its current turn."
        if record is None:  # finished, and its record is in another process
            return f"Queued for {name} (position {position}); it reads it when it is continued."
        take_key = f"{record.run_epoch + 1}:r"
        mail = self.store.take(seat.lead, seat.team, name, take_key)
        if not mail:
            return f"Delivered to {name}."
        try:
            revived = self.manager.revive(record, self.render(seat.team, mail))
        except ToolError:
            self.store.untake(seat.lead, seat.team, name, take_key)
            raise
        if not revived:
            self.store.untake(seat.lead, seat.team, name, take_key)
            return f"Queued for {name} (position {position}); it cannot be woken now."
        return f"Delivered to {name}; it had finished and starts a new run with it."

    # -- the lead's view -----------------------------------------------------------------------
    def status_lines(self, lead: str, team: str) -> list[str]:
        unread = self.store.unread(lead, team)
        lines = []
        for row in self.store.members(lead, team):
            record = self.manager.records.get(row["task_id"])
            status = record.status if record is not None else row["status"]
            count = unread.get(row["name"], 0)
            lines.append(f"- {row['name']} {row['task_id']} {status}, unread mail {count}")
        return lines

    def still_working(self, lead: str, team: str) -> list[str]:
        working = []
        for row in self.store.members(lead, team):
            record = self.manager.records.get(row["task_id"])
            status = record.status if record is not None else TaskStatus(row["status"])
            if status in ACTIVE:
                working.append(f"{row['name']} ({row['task_id']}, {status})")
        return working

    async def wait(self, lead: Session, team: str, until: str, timeout: float) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if until == "mail":
            self.mail_waiters.add(lead.session_id)
        durable = self.manager.engine.replays
        try:
            while True:
                changed = self.manager.change_event()
                if durable:  # mail a member on another worker sent a finished one wakes it here
                    self.wake_members(lead)
                if until == "mail":
                    key = "lead:" + secrets.token_hex(8)
                    mail = self.store.take(lead.session_id, team, LEAD, key)
                    if mail:
                        lines = self.status_lines(lead.session_id, team)
                        return "\n".join([self.render(team, mail), "", f"Team {team}:", *lines])
                working = self.still_working(lead.session_id, team)
                if not working:
                    lines = self.status_lines(lead.session_id, team)
                    return "\n".join([f"Every member of team {team} is idle or finished:", *lines])
                left = deadline - loop.time()
                if left <= 0:
                    raise ToolError(
                        "timeout",
                        f"team_wait timed out after {timeout:g}s; still working: "
                        f"{', '.join(working)}. Wait again, or mail them with team_send.",
                        {"still_working": working},
                    )
                # at least every second: a member in another process is read from the store
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=min(left, 1.0))
        finally:
            self.mail_waiters.discard(lead.session_id)

    # -- the tools -----------------------------------------------------------------------------
    def _seat_of(self, session: Session, seat: Seat | None, team: str | None) -> Seat:
        """The caller's seat: a member's own; the lead's in ``team`` (or its only team)."""
        if seat is not None:
            return seat
        teams = [name for _, name in self.store.teams(session.session_id)]
        if team is not None:
            if team not in teams:
                raise ToolError(
                    "unknown_team",
                    f"You lead no team {clip_shown(team)}. Your teams: "
                    f"{', '.join(teams) or '(none)'}.",
                )
            return Seat(session.session_id, team, LEAD)
        if len(teams) == 1:
            return Seat(session.session_id, teams[0], LEAD)
        if not teams:
            raise ToolError(
                "no_team", "You lead no team yet; form one with task(team=..., name=...)."
            )
        raise ToolError("which_team", f"You lead teams {', '.join(teams)}; give `team`.")

    def tools(
        self, session: Session, seat: Seat | None, names: Sequence[str]
    ) -> list[ToolSpec[Any]]:
        """The team tools ``names`` bound to ``session`` (a member's ``seat``; ``None``: the
        lead)."""
        retries = self.manager.config.retries

        async def run_send(params: TeamSendArgs, ctx: ToolContext) -> str:
            return await self.send(self._seat_of(session, seat, params.team), params.to,
                                   params.message)  # fmt: skip

        async def run_status(params: TeamStatusArgs, ctx: ToolContext) -> str:
            me = self._seat_of(session, seat, params.team)
            board = self.store.board(me.lead, me.team)
            counts = {s: sum(1 for item in board if item["status"] == s) for s in BOARD_STATUSES}
            unread = self.store.unread(me.lead, me.team).get(LEAD, 0)
            return "\n".join(
                [
                    f"Team {me.team}:",
                    *self.status_lines(me.lead, me.team),
                    f"Unread mail for you: {unread}.",
                    "Board: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + ".",
                ]
            )

        async def run_wait(params: TeamWaitArgs, ctx: ToolContext) -> str:
            me = self._seat_of(session, seat, params.team)
            if not 0 < params.timeout <= WAIT_MAX:
                raise ToolError(
                    "bad_timeout",
                    f"timeout is in seconds, more than 0 and at most {WAIT_MAX}; got "
                    f"{params.timeout:g}.",
                )
            return await self.wait(session, me.team, params.until, params.timeout)

        async def run_board_add(params: BoardAddArgs, ctx: ToolContext) -> str:
            me = self._seat_of(session, seat, params.team)
            item = self.store.board_add(me.lead, me.team, params.title, params.detail, me.name)
            self.manager.wake()
            return f"Added board item {item} (open): {params.title}"

        async def run_board_list(params: BoardListArgs, ctx: ToolContext) -> str:
            me = self._seat_of(session, seat, params.team)
            items = self.store.board(me.lead, me.team, params.status)
            if not items:
                return f"The board of team {me.team} has no {params.status or ''} items.".replace(
                    "  ", " "
                )
            return "\n".join(_board_line(item) for item in items)

        async def run_board_update(params: BoardUpdateArgs, ctx: ToolContext) -> str:
            me = self._seat_of(session, seat, params.team)
            return self.board_update(me, params)

        run: dict[str, tuple[str, type[BaseModel], Any]] = {
            "team_send": ("team_send.md", TeamSendArgs, run_send),
            "team_status": ("team_status.md", TeamStatusArgs, run_status),
            "team_wait": ("team_wait.md", TeamWaitArgs, run_wait),
            "board_add": ("board_add.md", BoardAddArgs, run_board_add),
            "board_list": ("board_list.md", BoardListArgs, run_board_list),
            "board_update": ("board_update.md", BoardUpdateArgs, run_board_update),
        }
        return [
            ToolSpec(
                name=name,
                description=prompt_text(run[name][0]),
                params=run[name][1],
                execute=run[name][2],
                prepare=prepare_team_args,
                max_retries=retries,
            )
            for name in names
        ]

    def board_update(self, me: Seat, params: BoardUpdateArgs) -> str:
        item = self.store.board_item(me.lead, me.team, params.id)
        if item is None:
            raise ToolError(
                "unknown_item", f"No board item {params.id} in team {me.team}; see board_list."
            )
        if params.owner is not None and params.owner not in self.names(me.lead, me.team):
            raise unknown_recipient(params.owner, self.names(me.lead, me.team), me.team)
        fields: dict[str, Any] = {}
        only_from: tuple[str, ...] | None = None
        if params.status is not None and params.status != item["status"]:
            if not board_move(item["status"], params.status):
                if params.status == "claimed" and item["status"] == "claimed":
                    raise _taken(item)
                raise ToolError(
                    "bad_move",
                    f"Board item {item['id']} is {item['status']}; it cannot become "
                    f"{params.status} (open → claimed → done or dropped; open again to release).",
                )
            fields["status"] = params.status
            only_from = (item["status"],)  # decided on the row: of two claims, one wins
            if params.status == "claimed":
                fields["owner"] = params.owner or (me.name if me.name != LEAD else None)
            elif params.status == "open":
                fields["owner"] = None
        elif params.status == "claimed" and item["owner"] not in (None, me.name, params.owner):
            raise _taken(item)
        if params.owner is not None and "owner" not in fields:
            fields["owner"] = params.owner
        if params.note is not None:
            fields["note"] = params.note
        if not fields:
            return f"Board item {item['id']} unchanged: {_board_line(item)}"
        updated = self.store.board_set(me.lead, me.team, item["id"], fields, only_from=only_from)
        if updated is None:  # another caller moved it first
            now = self.store.board_item(me.lead, me.team, item["id"]) or item
            if now["status"] == "claimed":
                raise _taken(now)
            raise ToolError(
                "board_changed",
                f"Board item {item['id']} changed meanwhile: it is now {now['status']}; "
                "read board_list and try again.",
            )
        self.manager.wake()
        return f"Updated board item: {_board_line(updated)}"


def _taken(item: dict[str, Any]) -> ToolError:
    owner = item["owner"] or "the lead"
    return ToolError(
        "already_claimed",
        f"Board item {item['id']} is already claimed by {owner}; pick another open item "
        "(board_list status=open) or mail them.",
        {"owner": item["owner"]},
    )


def _board_line(item: dict[str, Any]) -> str:
    owner = f" by {item['owner']}" if item["owner"] else ""
    line = f"{item['id']}. [{item['status']}{owner}] {item['title']}"
    if item.get("detail"):
        line += f" — {item['detail']}"
    if item.get("note"):
        line += f" (note: {item['note']})"
    return line
