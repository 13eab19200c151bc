"""The durable task record: a ``tasks`` table and an append-only ``task_events`` table.

Writes go through the store's write buffer (:meth:`kernos.runtime.Store.write_later`): what
happened in one loop turn is committed in one transaction on the store's writer thread, so a
thousand children do not mean ten thousand commits on the event loop; every read flushes first, so
a reader never sees an older state than a writer set.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from kernos.runtime import Store, open_usage, redact
from kernos.tasks._state import ACTIVE, TaskStatus
from kernos.tasks._store_fleet import _Executors
from kernos.tasks._store_render import progress_payload as progress_payload
from kernos.tasks._store_render import progress_text as progress_text
from kernos.tasks._store_render import render_event as render_event
from kernos.tasks._store_schema import (
    _COLUMNS,
    _INSERT_EVENT,
    _INSERT_KEYED_EVENT,
    _STILL_ACTIVE,
    id_chunks,
)
from kernos.tasks._store_schema import MIGRATIONS as MIGRATIONS
from kernos.tasks._store_schema import STATUS_CHANNEL as STATUS_CHANNEL


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, Linux); ``None`` when unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19] if len(fields) > 19 else None


def process_alive(pid: int, started: str | None) -> bool:
    """Whether ``pid`` is still the process that recorded ``started`` (pid reuse is caught)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if started is None:
        return True
    now = process_start(pid)
    return now is None or now == started


_OWNER_PID = os.getpid()
_OWNER_STARTED = process_start(_OWNER_PID)


class TaskStore(_Executors):
    """Task rows and their events in the runtime's store, SQLite or PostgreSQL (migration
    namespace ``tasks``)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.migrate("tasks", MIGRATIONS)
        self.pid = _OWNER_PID
        self.started = _OWNER_STARTED
        #: ``[tasks] on_crash = "resume"``: DBOS resumes a dead executor's tasks, so
        #: :meth:`reconcile` leaves them alone (the CLI sets it from the config)
        self.resume = False

    # -- writing -----------------------------------------------------------------------------
    def _write(self, sql: str, params: Sequence[Any]) -> None:
        self.store.write_later(sql, params)

    def flush(self) -> None:
        """Commit every buffered write now (see :meth:`kernos.runtime.Store.flush`): a write that
        can never be stored is dropped alone; a failed transaction keeps every write for the next
        flush and raises."""
        self.store.flush()

    def insert(self, row: dict[str, Any]) -> None:
        row = {
            **row,
            "owner_pid": self.pid,
            "owner_started": self.started,
            "updated_at": time.time(),
        }
        keys = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self._write(f"INSERT INTO tasks ({keys}) VALUES ({marks})", list(row.values()))

    def update(self, task_id: str, *, if_active: bool = False, **fields: Any) -> None:
        """Set ``fields`` of one task; ``if_active``: only while the stored task is still
        pending or running, so the first process to end a run (its executor, a canceller, the
        reaper) is the one whose end stands."""
        unknown = set(fields) - _COLUMNS
        if unknown:
            raise ValueError(f"unknown task columns: {sorted(unknown)}")
        fields["updated_at"] = time.time()
        for key in ("final_text", "error"):
            if isinstance(fields.get(key), str):
                fields[key] = redact(fields[key])
        sets = ", ".join(f"{key} = ?" for key in fields)
        where = "id = ?" + (_STILL_ACTIVE if if_active else "")
        self._write(f"UPDATE tasks SET {sets} WHERE {where}", [*fields.values(), task_id])
        if "status" in fields and self.store.dialect == "postgres":
            # with the update's commit: a process following the task reads it now, not at its
            # next poll (the DBOS engine's follower, see STATUS_CHANNEL)
            self._write("SELECT pg_notify(?, ?)", [STATUS_CHANNEL, task_id])

    def event(
        self, task_id: str, kind: str, payload: dict[str, Any], *, key: str | None = None
    ) -> None:
        """Append one event (secrets redacted).

        Its ``seq`` is allocated by the INSERT itself, inside the flush's write transaction, so
        another process appending to the same task (``kernos tasks cancel``) never collides.
        ``key``: the event's place in a durable run (the same on every replay of the run); an
        event whose key the task already has is not written again.
        """
        data = json.dumps(redact(payload), ensure_ascii=False, default=str)
        if key is None:
            self._write(_INSERT_EVENT, (task_id, kind, data, time.time(), task_id))
        else:
            self._write(_INSERT_KEYED_EVENT, (task_id, kind, data, time.time(), key, task_id))

    def new_id_taken(self, task_id: str) -> bool:
        self.flush()
        return bool(self.store.query("SELECT 1 FROM tasks WHERE id = ?", (task_id,)))

    # -- reading -----------------------------------------------------------------------------
    def get(self, task_id: str) -> dict[str, Any] | None:
        self.flush()
        rows = self.store.query("SELECT * FROM tasks WHERE id = ?", (task_id,))
        return dict(rows[0]) if rows else None

    def rows(self, task_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The rows of ``task_ids`` that exist, by id: one query per 500 ids, however many
        children a run follows."""
        self.flush()
        ids = list(dict.fromkeys(task_ids))
        found: dict[str, dict[str, Any]] = {}
        for chunk, marks in id_chunks(ids):
            for row in self.store.query(f"SELECT * FROM tasks WHERE id IN ({marks})", chunk):
                found[row["id"]] = dict(row)
        return found

    def recent(self, limit: int = 100) -> list[dict[str, Any]]:
        self.flush()
        rows = self.store.query("SELECT * FROM tasks ORDER BY created_at DESC LIMIT ?", (limit,))
        return [dict(row) for row in rows]

    def children(self, parent_session: str) -> list[dict[str, Any]]:
        """Every task whose parent is ``parent_session``, oldest first."""
        self.flush()
        rows = self.store.query(
            "SELECT * FROM tasks WHERE parent_session = ? ORDER BY created_at, id",
            (parent_session,),
        )
        return [dict(row) for row in rows]

    def events(self, task_id: str) -> list[dict[str, Any]]:
        self.flush()
        rows = self.store.query(
            "SELECT seq, type, payload, created_at FROM task_events WHERE task_id = ? ORDER BY seq",
            (task_id,),
        )
        return [{**dict(row), "payload": json.loads(row["payload"])} for row in rows]

    def last_seq(self, task_id: str) -> int:
        """The ``seq`` of the task's newest event (0: none yet): a cheap "did it change"."""
        self.flush()
        rows = self.store.query(
            "SELECT COALESCE(MAX(seq), 0) AS seq FROM task_events WHERE task_id = ?", (task_id,)
        )
        return int(rows[0]["seq"]) if rows else 0

    # -- what ``kernos tasks watch`` reads ----------------------------------------------------
    def watch_mark(self) -> tuple[Any, ...]:
        """A few numbers that change whenever a task row or a ``usage`` row does."""
        from kernos.runtime import open_usage

        self.flush()
        open_usage(self.store)
        (tasks,) = self.store.query("SELECT COUNT(*), MAX(updated_at) FROM tasks")
        (usage,) = self.store.query("SELECT MAX(id) FROM usage")
        return (tasks[0], tasks[1], usage[0])

    def usage_after(self, after: int) -> list[dict[str, Any]]:
        """The ``usage`` rows (model responses) with an id past ``after``, oldest first."""
        from kernos.runtime import open_usage

        open_usage(self.store)
        rows = self.store.query(
            "SELECT id, session_id, agent, model, provider, input_tokens, output_tokens,"
            " cached_tokens FROM usage WHERE id > ? ORDER BY id",
            (after,),
        )
        return [dict(row) for row in rows]

    def resumes(self, task_ids: Sequence[str]) -> dict[tuple[str, int], int]:
        """How often each run (task id, epoch) of ``task_ids`` was resumed after its executor
        died (its ``resumed`` events), in one query."""
        self.flush()
        if not task_ids:
            return {}
        marks = ", ".join("?" for _ in task_ids)
        rows = self.store.query(
            "SELECT task_id, payload FROM task_events WHERE type = 'resumed' "
            f"AND task_id IN ({marks})",
            tuple(task_ids),
        )
        counts: dict[tuple[str, int], int] = {}
        for row in rows:
            epoch = json.loads(row["payload"]).get("epoch")
            if isinstance(epoch, int):
                counts[row["task_id"], epoch] = counts.get((row["task_id"], epoch), 0) + 1
        return counts

    def transcript(self, task_id: str) -> list[str]:
        """The task's transcript as text lines (messages, tool calls, results, state changes)."""
        lines: list[str] = []
        for event in self.events(task_id):
            lines.extend(render_event(event["type"], event["payload"]).splitlines())
        return lines

    # -- recovery ----------------------------------------------------------------------------
    def reconcile(self, *, resume: bool | None = None) -> list[str]:
        """Mark ``lost`` every pending/running task whose owning process is gone; returns ids.

        A task of the DBOS engine that an executor took belongs to that executor: it is lost when
        the executor (on this host) is gone, unless ``resume`` (``[tasks] on_crash = "resume"``):
        then DBOS resumes it. Executors on other hosts are judged by their heartbeats (the
        engine's reaper). One no executor took yet goes with the process that spawned it.
        ``resume`` defaults to :attr:`resume`.
        """
        resume = self.resume if resume is None else resume
        self.flush()
        marks = ", ".join("?" for _ in ACTIVE)
        rows = self.store.query(
            "SELECT id, owner_pid, owner_started, status, engine, executor FROM tasks "
            f"WHERE status IN ({marks})",
            [str(s) for s in ACTIVE],
        )
        lost: list[str] = []
        host = socket.gethostname()
        for row in rows:
            pid, started = row["owner_pid"], row["owner_started"]
            if row["engine"] == "dbos" and (resume or row["executor"]):
                if resume:
                    continue  # DBOS resumes it elsewhere
                where, _, number = str(row["executor"]).rpartition(":")
                if where != host or not number.isdigit():
                    continue
                if int(number) != pid:
                    pid, started = int(number), None
            if pid == self.pid or (pid is not None and process_alive(pid, started)):
                continue
            reason = f"the process that ran it (pid {pid}) ended before the task finished"
            if self.lose(row["id"], row["status"], reason):
                lost.append(row["id"])
        return lost

    def cancel(self, task_id: str) -> tuple[bool, str]:
        """Cancel from outside the owning process: ``(changed, what happened)``.

        The process that runs the child is asked (it polls and stops the child): the spawning
        process on the local engine, the executor that took it on the DBOS engine. A DBOS child
        still queued (no executor took it) is cancelled here and now, so no executor starts it
        even when the process that spawned it is gone. A dead owner's task is reconciled to
        ``lost`` first, so nothing is left to cancel.
        """
        self.reconcile()
        row = self.get(task_id)
        if row is None:
            return False, f"no task {task_id} in the store"
        if row["status"] not in {str(s) for s in ACTIVE}:
            return False, f"{task_id} is {row['status']}; nothing changed"
        self.request_cancel(task_id)
        if row["engine"] == "dbos" and self.cancel_queued(task_id, row["status"]):
            return True, f"cancelled {task_id} (it was {row['status']}; no executor had taken it)"
        runs_it = f"pid {row['owner_pid']}"
        if row["engine"] == "dbos" and row["executor"]:
            runs_it = f"executor {row['executor']}"
        return True, (
            f"cancel requested for {task_id} ({row['status']}); the process running it "
            f"({runs_it}) stops it at its next cancel check, at most 0.5 s away"
        )

    def request_cancel(self, task_id: str) -> None:
        self.update(task_id, cancel_requested=1)
        self.event(task_id, "cancel_requested", {"by": f"pid {self.pid}"})
        self.flush()

    def cancel_queued(self, task_id: str, status: str, reason: str | None = None) -> bool:
        """Cancel a DBOS task no executor has taken yet; ``False`` when one has (it then stops
        the task on its own cancel poll) or the task is no longer active."""
        reason = reason or "cancelled from the command line"
        self.flush()
        now = time.time()
        with self.store.transaction() as conn:
            cursor = conn.execute(
                "UPDATE tasks SET status = ?, finished_at = ?, updated_at = ? WHERE id = ? "
                "AND engine = 'dbos' AND executor IS NULL" + _STILL_ACTIVE,
                (str(TaskStatus.CANCELLED), now, now, task_id),
            )
            if not cursor.rowcount:
                return False
            data = json.dumps({"from": status, "to": "cancelled", "why": reason})
            conn.execute(_INSERT_EVENT, (task_id, "status", data, now, task_id))
        return True

    def cancel_requests(self) -> list[str]:
        """Ids of the active tasks this process runs that another process asked to cancel (see
        :meth:`control_requests`)."""
        return self.control_requests()[0]

    def control_requests(self) -> tuple[list[str], list[str]]:
        """``(cancels, interrupts)``, in one query: the ids of the tasks this process runs that
        another process asked to stop.

        Cancels: active tasks whose cancel was asked: the local engine's own children, and the
        DBOS tasks this executor took (the process that spawned a DBOS child does not act on a
        request: its executor does, so one process writes the end); also DBOS tasks of this
        executor that the spawning process already recorded ``cancelled`` (its
        ``task_cancel``): this executor then stops the run. Interrupts: DBOS tasks this
        executor runs whose current run was asked to stop after its current step
        (:meth:`request_interrupt`); a task asked both is a cancel."""
        self.flush()
        me = executor_id()
        marks = ", ".join("?" for _ in ACTIVE)
        cancel = (
            "(cancel_requested = 1 AND (executor = ? OR (owner_pid = ? AND engine = 'local')) "
            f"AND status IN ({marks})) OR (executor = ? AND status = 'cancelled' "
            "AND engine = 'dbos' AND finished_at > ?)"
        )
        interrupt = (
            "executor = ? AND status IN ('running', 'waiting') AND engine = 'dbos' "
            "AND interrupt_epoch = run_epoch"
        )
        # a row the interrupt matches matches the cancel only by its cancel_requested
        rows = self.store.query(
            f"SELECT id, CASE WHEN {interrupt} AND cancel_requested = 0 THEN 1 ELSE 0 END "
            f"AS interrupt FROM tasks WHERE {cancel} OR ({interrupt})",
            [me, me, self.pid, *(str(s) for s in ACTIVE), me, time.time() - 60, me],
        )
        cancels = [row["id"] for row in rows if not row["interrupt"]]
        return cancels, [row["id"] for row in rows if row["interrupt"]]

    def request_interrupt(self, task_id: str, epoch: int) -> bool:
        """Ask the executor of ``task_id``'s run ``epoch`` (in whichever process) to stop it after
        its current step, committed now; ``False`` when that run is not running."""
        self.flush()
        now = time.time()
        with self.store.transaction() as conn:
            cursor = conn.execute(
                "UPDATE tasks SET interrupt_epoch = ?, updated_at = ? WHERE id = ? "
                "AND run_epoch = ? AND status IN ('running', 'waiting')",
                (epoch, now, task_id, epoch),
            )
            if not cursor.rowcount:
                return False
            data = json.dumps({"epoch": epoch})
            conn.execute(_INSERT_EVENT, (task_id, "interrupt_requested", data, now, task_id))
        return True

    # -- the inbox of durable runs (the DBOS engine) -------------------------------------------
    def send(self, task_id: str, message: str, key: str | None = None) -> int | None:
        """Put ``message`` in the inbox of an active task, committed now; its place among the
        messages not taken yet (1: the first), or ``None`` when the task is not active any
        more (nothing is stored). The run executing the task takes it (:meth:`take_messages`).

        ``key``: the send's place in a durable run, the same on every replay of the calling
        step (:meth:`kernos.tasks._dbos.DBOSEngine.send_key`). A message the task already has
        under it is not stored again, whatever the task's status now: the answer is its place
        among the messages not taken yet, counting itself (1 when it was taken already), as
        the first send said or later. Checked and written in one transaction under the
        writer's lock, so two senders with the same key store one message."""
        self.flush()  # a child spawned in this loop turn: its row first
        now = time.time()
        with self.store.transaction() as conn:  # the writer's lock: one seq per message
            if key is not None:
                sent = conn.execute(
                    "SELECT seq FROM task_inbox WHERE task_id = ? AND send_key = ?",
                    (task_id, key),
                ).fetchall()
                if sent:  # a replay of a send that committed
                    seq = sent[0][0]
                    rows = conn.execute(
                        "SELECT COUNT(*) FROM task_inbox WHERE task_id = ? AND seq <= ? "
                        "AND (taken_by IS NULL OR seq = ?)",
                        (task_id, seq, seq),
                    ).fetchall()
                    return int(rows[0][0])
            cursor = conn.execute(
                "INSERT INTO task_inbox (task_id, seq, message, created_at, send_key) "
                "SELECT ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM task_inbox WHERE task_id = ?), "
                "?, ?, ? WHERE EXISTS (SELECT 1 FROM tasks WHERE id = ?" + _STILL_ACTIVE + ")",
                (task_id, task_id, message, now, key, task_id),
            )
            if not cursor.rowcount:
                return None
            rows = conn.execute(
                "SELECT COUNT(*) FROM task_inbox WHERE task_id = ? AND taken_by IS NULL",
                (task_id,),
            ).fetchall()
        return int(rows[0][0])

    def take_messages(self, task_id: str, epoch: int, ordinal: int) -> tuple[list[str], bool]:
        """What run ``epoch`` of ``task_id`` reads after its prompt number ``ordinal``:
        ``(messages in send order, interrupted)``.

        The take's key is ``EPOCH:mORDINAL``. The messages already taken under it come back
        (a replayed run gets exactly what its first attempt got); else every one not taken yet,
        marked with the key in one transaction (a message sent meanwhile is in it or left for
        the next take: never lost, never taken twice). ``interrupted``: the run was asked to
        stop (:meth:`request_interrupt`); then nothing is taken.

        One query (the task's row joined with its inbox) when nothing waits, as at the end of
        almost every run; a write only when something does.
        """
        key = f"{epoch}:m{ordinal}"
        rows = self.store.query(
            "SELECT t.interrupt_epoch, i.seq, i.message, i.taken_by FROM tasks t "
            "LEFT JOIN task_inbox i ON i.task_id = t.id AND (i.taken_by IS NULL OR i.taken_by = ?) "
            "WHERE t.id = ? ORDER BY i.seq",
            (key, task_id),
        )
        if not rows:
            return [], False  # the row is gone
        if rows[0]["interrupt_epoch"] == epoch:
            return [], True
        waiting = [row for row in rows if row["seq"] is not None]
        mine = [row["message"] for row in waiting if row["taken_by"] == key]
        if mine or not waiting:
            return mine, False
        with self.store.transaction() as conn:
            taken = conn.execute(  # a take of this key that ran meanwhile (never in practice)
                "SELECT seq, message FROM task_inbox WHERE task_id = ? AND taken_by = ?",
                (task_id, key),
            ).fetchall()
            if not taken:
                taken = conn.execute(
                    "UPDATE task_inbox SET taken_by = ? WHERE task_id = ? AND taken_by IS NULL "
                    "RETURNING seq, message",
                    (key, task_id),
                ).fetchall()
        return [message for _, message in sorted((row[0], row[1]) for row in taken)], False

    # -- usage, read with the task each row is of (``kernos usage``, ``kernos tasks``) --------
    def usage_rows(self, since: float | None) -> list[dict[str, Any]]:
        """The ``usage`` rows stored since ``since`` (oldest first), each with ``task_id``: the
        task whose child session made it (``None``: a main session's)."""
        open_usage(self.store)
        rows = self.store.query(
            "SELECT u.*, t.id AS task_id FROM usage u LEFT JOIN tasks t ON t.child_session ="
            " u.session_id WHERE u.created_at >= ? ORDER BY u.id",
            (since or 0.0,),
        )
        return [dict(row) for row in rows]

    def call_rows(self, since: float | None) -> list[dict[str, Any]]:
        """The repaired / rejected tool calls stored since ``since`` (oldest first), each with
        ``task_id`` as in :meth:`usage_rows`."""
        open_usage(self.store)
        rows = self.store.query(
            "SELECT c.*, t.id AS task_id FROM usage_calls c LEFT JOIN tasks t ON t.child_session ="
            " c.session_id WHERE c.created_at >= ? ORDER BY c.id",
            (since or 0.0,),
        )
        return [dict(row) for row in rows]

    def session_usage(self, session_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """The ``usage`` rows of each of ``session_ids`` that has some (oldest first), by
        session id: one query per 500 sessions."""
        open_usage(self.store)
        wanted = sorted(set(session_ids))
        found: dict[str, list[dict[str, Any]]] = {}
        for chunk, marks in id_chunks(wanted):
            query = f"SELECT * FROM usage WHERE session_id IN ({marks}) ORDER BY id"
            for row in self.store.query(query, chunk):
                found.setdefault(row["session_id"], []).append(dict(row))
        return found


def executor_id() -> str:
    """This process as a task executor: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def child_session_row(store: TaskStore, task_id: str) -> dict[str, Any] | None:
    """The session of task ``task_id``'s child, shaped like a ``kernos sessions`` row (its
    tokens are its turns'); ``None`` when there is no such task."""
    task = store.get(task_id)
    if task is None:
        return None
    session_id = task.get("child_session") or "s_" + task_id.removeprefix("t_")
    return {
        "id": session_id,
        "agent": task.get("target"),
        "model": task.get("model"),
        "turns": None,
        "input_tokens": None,
        "output_tokens": None,
        "started_at": task.get("created_at"),
        "last_active": task.get("finished_at"),
        "first_prompt": task.get("prompt"),
    }
