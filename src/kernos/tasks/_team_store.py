"""The durable side of teams: members, mail and the board (migration namespace ``teams``).

A team is named by its lead's session id and its name. Mail is stored once per recipient
(``send_key``: the calling step's key in a durable run, as ``task_send``'s send keys, see
:meth:`kernos.tasks.TaskStore.send`) and claimed once: a take marks what it reads with its key in
the same transaction, and a take replayed under the same key reads the same mail again.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from kernos.runtime import Store, redact

#: the recipient name mail to the lead is stored under
LEAD = "lead"

MIGRATIONS = [
    (
        1,
        "team members, team mail and the team board",
        """
        CREATE TABLE team_members (
            task_id TEXT PRIMARY KEY,
            lead_session TEXT NOT NULL,
            team TEXT NOT NULL,
            name TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE UNIQUE INDEX team_members_name ON team_members(lead_session, team, name);
        CREATE TABLE team_mail (
            lead_session TEXT NOT NULL,
            team TEXT NOT NULL,
            recipient TEXT NOT NULL,
            seq INTEGER NOT NULL,
            sender TEXT NOT NULL,
            message TEXT NOT NULL,
            send_key TEXT,
            taken_by TEXT,
            created_at REAL NOT NULL,
            taken_at REAL,
            PRIMARY KEY (lead_session, team, recipient, seq)
        );
        CREATE UNIQUE INDEX team_mail_send_key
            ON team_mail(lead_session, team, recipient, send_key);
        CREATE TABLE team_board (
            lead_session TEXT NOT NULL,
            team TEXT NOT NULL,
            id INTEGER NOT NULL,
            title TEXT NOT NULL,
            detail TEXT,
            status TEXT NOT NULL,
            owner TEXT,
            note TEXT,
            created_by TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (lead_session, team, id)
        )
        """,
    ),
    (
        2,
        "model requests of each team",
        # ``[tasks] team_max_turns`` across processes (the DBOS engine's members run on any
        # worker): one conditional increment per model request
        """
        CREATE TABLE team_turns (
            lead_session TEXT NOT NULL,
            team TEXT NOT NULL,
            requests INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (lead_session, team)
        )
        """,
    ),
    (
        3,
        "the model requests a team's count holds, by key",
        # a durable run replayed after a crash asks again for the requests it made: each is
        # counted once, under its run and ordinal (TeamStore.count_request)
        """
        CREATE TABLE team_turn_keys (
            lead_session TEXT NOT NULL,
            team TEXT NOT NULL,
            turn_key TEXT NOT NULL,
            PRIMARY KEY (lead_session, team, turn_key)
        )
        """,
    ),
]


class TeamStore:
    """Team rows in the runtime's store, SQLite or PostgreSQL."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.migrate("teams", MIGRATIONS)

    # -- members -------------------------------------------------------------------------------
    def join(self, lead: str, team: str, name: str, task_id: str) -> None:
        self.store.write_later(
            "INSERT INTO team_members (task_id, lead_session, team, name, created_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (task_id) DO NOTHING",
            (task_id, lead, team, name, time.time()),
        )

    def membership(self, task_id: str) -> tuple[str, str, str] | None:
        """``(lead session, team, name)`` of a member task, or ``None``."""
        self.store.flush()
        rows = self.store.query(
            "SELECT lead_session, team, name FROM team_members WHERE task_id = ?", (task_id,)
        )
        return (rows[0][0], rows[0][1], rows[0][2]) if rows else None

    def members(self, lead: str, team: str) -> list[dict[str, Any]]:
        """The members of a team with their task's status, oldest first."""
        self.store.flush()
        rows = self.store.query(
            "SELECT m.name, m.task_id, t.status, t.residency, t.run_epoch FROM team_members m "
            "LEFT JOIN tasks t ON t.id = m.task_id WHERE m.lead_session = ? AND m.team = ? "
            "ORDER BY m.created_at, m.name",
            (lead, team),
        )
        return [dict(row) for row in rows]

    def teams(self, lead: str | None = None) -> list[tuple[str, str]]:
        """Every ``(lead session, team)``, or the teams of ``lead``."""
        self.store.flush()
        where, params = ("WHERE lead_session = ? ", (lead,)) if lead else ("", ())
        rows = self.store.query(
            "SELECT lead_session, team, MIN(created_at) AS since FROM team_members "
            f"{where}GROUP BY lead_session, team ORDER BY since",
            params,
        )
        return [(row[0], row[1]) for row in rows]

    # -- the team bound -----------------------------------------------------------------------
    def count_request(self, lead: str, team: str, limit: int, key: str | None = None) -> int | None:
        """Count one model request of a team against ``limit`` (processes counting at once never
        pass it together); the count now, or ``None`` when ``limit`` requests were made already.
        A request counted under ``key`` before (the same request of a run replayed after a
        crash) is not counted again: the answer is the count now."""
        self.store.flush()
        team_of = "lead_session = ? AND team = ?"
        with self.store.transaction() as conn:
            if key is not None:
                fresh = conn.execute(
                    "INSERT INTO team_turn_keys (lead_session, team, turn_key) VALUES (?, ?, ?) "
                    "ON CONFLICT (lead_session, team, turn_key) DO NOTHING RETURNING turn_key",
                    (lead, team, key),
                ).fetchall()
                if not fresh:  # counted when first made
                    rows = conn.execute(
                        f"SELECT requests FROM team_turns WHERE {team_of}", (lead, team)
                    ).fetchall()
                    return int(rows[0][0]) if rows else 0
            conn.execute(
                "INSERT INTO team_turns (lead_session, team, requests) VALUES (?, ?, 0) "
                "ON CONFLICT (lead_session, team) DO NOTHING",
                (lead, team),
            )
            # one conditional statement: of two processes at the limit, one passes
            rows = conn.execute(
                f"UPDATE team_turns SET requests = requests + 1 WHERE {team_of} "
                "AND requests < ? RETURNING requests",
                (lead, team, limit),
            ).fetchall()
            if not rows:
                if key is not None:  # not counted: a replay asks again, and is refused again
                    conn.execute(
                        f"DELETE FROM team_turn_keys WHERE {team_of} AND turn_key = ?",
                        (lead, team, key),
                    )
                return None
        return int(rows[0][0])

    def requests(self, lead: str, team: str) -> int:
        rows = self.store.query(
            "SELECT requests FROM team_turns WHERE lead_session = ? AND team = ?", (lead, team)
        )
        return int(rows[0][0]) if rows else 0

    # -- mail ----------------------------------------------------------------------------------
    def post(
        self,
        lead: str,
        team: str,
        sender: str,
        recipient: str,
        message: str,
        key: str | None = None,
    ) -> int:
        """Store ``message`` for ``recipient``, committed now; its place among the recipient's
        unread mail (1: the first). A message already stored under ``key`` is not stored again:
        the answer is its place then (1 when it was read already)."""
        self.store.flush()
        now = time.time()
        team_of = "lead_session = ? AND team = ? AND recipient = ?"
        with self.store.transaction() as conn:
            if key is not None:
                sent = conn.execute(
                    f"SELECT seq FROM team_mail WHERE {team_of} AND send_key = ?",
                    (lead, team, recipient, key),
                ).fetchall()
                if sent:  # a replay of a send that committed
                    rows = conn.execute(
                        f"SELECT COUNT(*) FROM team_mail WHERE {team_of} AND seq <= ? "
                        "AND (taken_by IS NULL OR seq = ?)",
                        (lead, team, recipient, sent[0][0], sent[0][0]),
                    ).fetchall()
                    return int(rows[0][0])
            conn.execute(
                "INSERT INTO team_mail (lead_session, team, recipient, seq, sender, message, "
                "send_key, created_at) SELECT ?, ?, ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ?, ? "
                f"FROM team_mail WHERE {team_of}",
                (lead, team, recipient, sender, redact(message), key, now, lead, team, recipient),
            )
            rows = conn.execute(
                f"SELECT COUNT(*) FROM team_mail WHERE {team_of} AND taken_by IS NULL",
                (lead, team, recipient),
            ).fetchall()
        return int(rows[0][0])

    def take(self, lead: str, team: str, recipient: str, key: str) -> list[tuple[str, str]]:
        """The recipient's unread mail as ``(sender, message)`` in send order, marked read under
        ``key`` in the same transaction; the mail a take with ``key`` read already, if any (a
        replayed take reads the same again)."""
        self.store.flush()
        team_of = "lead_session = ? AND team = ? AND recipient = ?"
        with self.store.transaction() as conn:
            taken = conn.execute(
                f"SELECT seq, sender, message FROM team_mail WHERE {team_of} AND taken_by = ?",
                (lead, team, recipient, key),
            ).fetchall()
            if not taken:
                taken = conn.execute(
                    f"UPDATE team_mail SET taken_by = ?, taken_at = ? WHERE {team_of} "
                    "AND taken_by IS NULL RETURNING seq, sender, message",
                    (key, time.time(), lead, team, recipient),
                ).fetchall()
        return [(row[1], row[2]) for row in sorted(taken, key=lambda row: row[0])]

    def untake(self, lead: str, team: str, recipient: str, key: str) -> None:
        """Give back what a take with ``key`` read (its reader could not be woken with it)."""
        self.store.write_now(
            "UPDATE team_mail SET taken_by = NULL, taken_at = NULL WHERE lead_session = ? "
            "AND team = ? AND recipient = ? AND taken_by = ?",
            (lead, team, recipient, key),
        )

    def unread(self, lead: str, team: str) -> dict[str, int]:
        """How many unread messages each recipient of a team has."""
        self.store.flush()
        rows = self.store.query(
            "SELECT recipient, COUNT(*) FROM team_mail WHERE lead_session = ? AND team = ? "
            "AND taken_by IS NULL GROUP BY recipient",
            (lead, team),
        )
        return {row[0]: int(row[1]) for row in rows}

    def mail_mark(self) -> tuple[Any, ...]:
        """Numbers that change whenever a member joins or mail is sent or read (any team)."""
        self.store.flush()
        (members,) = self.store.query("SELECT COUNT(*) FROM team_members")
        (mail,) = self.store.query("SELECT COUNT(*), COUNT(taken_by) FROM team_mail")
        return (members[0], mail[0], mail[1])

    def mail(self, lead: str, team: str) -> list[dict[str, Any]]:
        """Every message of a team, in the order sent."""
        self.store.flush()
        rows = self.store.query(
            "SELECT recipient, seq, sender, message, taken_by, created_at FROM team_mail "
            "WHERE lead_session = ? AND team = ? ORDER BY created_at, seq",
            (lead, team),
        )
        return [dict(row) for row in rows]

    # -- the board -----------------------------------------------------------------------------
    def board_add(self, lead: str, team: str, title: str, detail: str | None, by: str) -> int:
        """A new ``open`` item; its id (1, 2, … per team)."""
        self.store.flush()
        now = time.time()
        with self.store.transaction() as conn:
            rows = conn.execute(
                "INSERT INTO team_board (lead_session, team, id, title, detail, status, "
                "created_by, created_at, updated_at) "
                "SELECT ?, ?, COALESCE(MAX(id), 0) + 1, ?, ?, 'open', ?, ?, ? FROM team_board "
                "WHERE lead_session = ? AND team = ? RETURNING id",
                (lead, team, title, detail, by, now, now, lead, team),
            ).fetchall()
        return int(rows[0][0])

    def board(self, lead: str, team: str, status: str | None = None) -> list[dict[str, Any]]:
        self.store.flush()
        extra, params = (" AND status = ?", (status,)) if status else ("", ())
        rows = self.store.query(
            "SELECT id, title, detail, status, owner, note, created_by FROM team_board "
            f"WHERE lead_session = ? AND team = ?{extra} ORDER BY id",
            (lead, team, *params),
        )
        return [dict(row) for row in rows]

    def board_item(self, lead: str, team: str, item: int) -> dict[str, Any] | None:
        self.store.flush()
        rows = self.store.query(
            "SELECT id, title, detail, status, owner, note, created_by FROM team_board "
            "WHERE lead_session = ? AND team = ? AND id = ?",
            (lead, team, item),
        )
        return dict(rows[0]) if rows else None

    def board_set(
        self,
        lead: str,
        team: str,
        item: int,
        fields: dict[str, Any],
        *,
        only_from: Sequence[str] | None = None,
    ) -> dict[str, Any] | None:
        """Set ``fields`` of one item in one conditional statement (``only_from``: only while
        its status is one of these, so of two claims of one open item exactly one wins); the
        item as it is now, or ``None`` when the condition did not hold."""
        sets = ", ".join(f"{key} = ?" for key in fields)
        condition = ""
        if only_from:
            condition = " AND status IN (" + ", ".join("?" for _ in only_from) + ")"
        rows = self.store.write_now(
            f"UPDATE team_board SET {sets}, updated_at = ? WHERE lead_session = ? AND team = ? "
            f"AND id = ?{condition} RETURNING id, title, detail, status, owner, note, created_by",
            (*fields.values(), time.time(), lead, team, item, *(only_from or ())),
        )
        return dict(rows[0]) if rows else None

    # -- the overview (``kernos teams``) -------------------------------------------------------
    def overview(self) -> list[dict[str, Any]]:
        """Every team, oldest first: its lead, members (name, task id, status, unread mail),
        the lead's unread mail and the board's items."""
        document = []
        for lead, team in self.teams():
            unread = self.unread(lead, team)
            members = [
                {
                    "name": row["name"],
                    "task_id": row["task_id"],
                    "status": row["status"],
                    "unread": unread.get(row["name"], 0),
                }
                for row in self.members(lead, team)
            ]
            document.append(
                {
                    "team": team,
                    "lead_session": lead,
                    "lead_unread": unread.get(LEAD, 0),
                    "members": members,
                    "board": self.board(lead, team),
                }
            )
        return document
