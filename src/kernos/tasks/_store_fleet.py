"""The task store's rows of the DBOS engine's executors: claims and takes, completion notices,
heartbeats, the reaper's lease, and the children of an executor that is gone."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kernos.runtime import ApprovalStore, Store, redact
from kernos.tasks._state import Residency, TaskStatus
from kernos.tasks._store_schema import _INSERT_EVENT, _STILL_ACTIVE, id_chunks


class _Executors:
    """The executors' part of :class:`~kernos.tasks._store.TaskStore`."""

    store: Store

    if TYPE_CHECKING:

        def flush(self) -> None: ...

    def claim(self, task_id: str, executor: str) -> bool:
        """Take an active task no executor runs yet for ``executor`` (or one the reaper already
        gave it); ``False`` when it is not there to take (cancelled, lost, done, taken)."""
        return task_id in self.take(executor, [task_id])

    def take(self, executor: str, task_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """:meth:`claim` each of ``task_ids`` for ``executor``; the rows taken, by id, as they
        are now (what a worker rebuilds each child from).

        Conditional updates (:meth:`kernos.runtime.Store.write_now`), one per 500 ids:
        of executors taking the same task at once exactly one gets it, without the writer's
        lock, and a worker that sixty children reach at once asks once, not sixty times.
        """
        taken: dict[str, dict[str, Any]] = {}
        ids = list(dict.fromkeys(task_ids))
        for chunk, marks in id_chunks(ids):
            rows = self.store.write_now(
                f"UPDATE tasks SET executor = ?, updated_at = ? WHERE id IN ({marks})"
                f"{_STILL_ACTIVE} AND (executor IS NULL OR executor = ?) RETURNING *",
                (executor, time.time(), *chunk, executor),
            )
            taken.update((row["id"], dict(row)) for row in rows)
        return taken

    def claim_notice(self, task_id: str, epoch: int) -> bool:
        """Claim the completion notice of ``task_id``'s run ``epoch``: ``True`` exactly once,
        whichever processes ask at the same time."""
        return task_id in self.claim_notices([(task_id, epoch)])

    def claim_notices(self, runs: Sequence[tuple[str, int]]) -> set[str]:
        """:meth:`claim_notice` for each ``(task id, epoch)``: the ids whose notice this call
        claimed. One conditional ``UPDATE`` per epoch (and 500 ids), see :meth:`take`."""
        by_epoch: dict[int, list[str]] = {}
        for task_id, epoch in runs:
            by_epoch.setdefault(epoch, []).append(task_id)
        claimed: set[str] = set()
        for epoch, task_ids in sorted(by_epoch.items()):
            ids = list(dict.fromkeys(task_ids))
            for chunk, marks in id_chunks(ids):
                rows = self.store.write_now(
                    f"UPDATE tasks SET notified_epoch = ? WHERE id IN ({marks}) "
                    "AND notified_epoch < ? RETURNING id",
                    (epoch, *chunk, epoch),
                )
                claimed.update(row["id"] for row in rows)
        return claimed

    def deliver_notice(self, task_id: str, epoch: int, parent_session: str, message: str) -> bool:
        """Claim the completion notice of ``task_id``'s run ``epoch`` and put ``message`` in the
        inbox of the task whose session is ``parent_session`` (a durable child that spawned
        it), in one transaction: ``True`` exactly once, whichever processes deliver it at the
        same time (its executor, a follower, the parent's rebuild); a replay of the parent's
        take then gets it again under its key (:meth:`take_messages`). ``False``: claimed
        already, or ``parent_session`` is no task's (nothing is claimed then).

        The inbox takes it whatever the parent's status: a parent run that ended first reads it
        when it is continued (``task_send``), as a local parent does its queued notices."""
        self.flush()  # the end it reports first: no one reads the notice of a run still active
        now = time.time()
        with self.store.transaction() as conn:
            parent = _task_of_session(conn, parent_session)
            if parent is None:
                return False
            cursor = conn.execute(
                "UPDATE tasks SET notified_epoch = ? WHERE id = ? AND notified_epoch < ?",
                (epoch, task_id, epoch),
            )
            if not cursor.rowcount:
                return False
            conn.execute(
                "INSERT INTO task_inbox (task_id, seq, message, created_at) "
                "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ? FROM task_inbox WHERE task_id = ?",
                (parent, redact(message), now, parent),
            )
        return True

    def tell_session(self, parent_session: str, message: str, key: str) -> bool:
        """Put ``message`` in the inbox of the task whose session is ``parent_session`` (a
        durable child), once under ``key`` however often it is told (a replayed or resumed run
        telling it again): ``True`` when this call stored it. ``False``: stored already, or
        ``parent_session`` is no task's. Its run reads it after its current turn, as it reads a
        grandchild's completion notice (:meth:`deliver_notice`)."""
        self.flush()
        now = time.time()
        with self.store.transaction() as conn:
            parent = _task_of_session(conn, parent_session)
            if parent is None:
                return False
            told = conn.execute(
                "SELECT 1 FROM task_inbox WHERE task_id = ? AND send_key = ?", (parent, key)
            ).fetchall()
            if told:
                return False
            conn.execute(
                "INSERT INTO task_inbox (task_id, seq, message, created_at, send_key) "
                "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ? FROM task_inbox WHERE task_id = ?",
                (parent, redact(message), now, key, parent),
            )
        return True

    def beat(
        self,
        executor: str,
        queues: Sequence[str] | None = None,
        *,
        app_version: str | None = None,
    ) -> None:
        """This executor is alive now, serving ``queues`` (``None``: every queue), running
        DBOS workflows of ``app_version`` (``None``: it does not say, as an executor of a
        kernos before the column: it may run any version)."""
        self.flush()
        now = time.time()
        served = None if queues is None else json.dumps(sorted(queues))
        with self.store.transaction() as conn:
            cursor = conn.execute(
                "UPDATE task_executors SET beat_at = ?, queues = ?, app_version = ? WHERE id = ?",
                (now, served, app_version, executor),
            )
            if not cursor.rowcount:
                conn.execute(
                    "INSERT INTO task_executors (id, beat_at, started_at, queues, app_version) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (executor, now, now, served, app_version),
                )

    def serving(self, within: float) -> dict[str, list[str] | None]:
        """The executors that beat within the last ``within`` seconds, each with the queues it
        serves (``None``: every queue; so too a column that does not read as a list of names)."""
        rows = self.store.query(
            "SELECT id, queues FROM task_executors WHERE beat_at >= ?", (time.time() - within,)
        )
        served: dict[str, list[str] | None] = {}
        for row in rows:
            try:
                names = json.loads(row["queues"]) if row["queues"] is not None else None
            except ValueError:
                names = None
            ok = isinstance(names, list) and all(isinstance(n, str) for n in names)
            served[row["id"]] = names if ok else None
        return served

    def live_versions(self, within: float) -> set[str | None]:
        """The application versions that the executors that beat within the last ``within``
        seconds run; ``None`` among them: a live executor that does not say (it may run any)."""
        rows = self.store.query(
            "SELECT DISTINCT app_version FROM task_executors WHERE beat_at >= ?",
            (time.time() - within,),
        )
        return {row["app_version"] for row in rows}

    def retire(self, executor: str) -> None:
        """``executor`` stops: its heartbeat and leases go, so another executor's reaper takes
        over what it left at its next beat instead of after three silent ones."""
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM task_executors WHERE id = ?", (executor,))
            conn.execute("DELETE FROM task_leases WHERE holder = ?", (executor,))

    def lease(self, name: str, holder: str, seconds: float) -> bool:
        """Hold the lease ``name`` for ``seconds`` more (``True``) unless another holder has it."""
        now = time.time()
        with self.store.transaction() as conn:
            cursor = conn.execute(
                "UPDATE task_leases SET holder = ?, until = ? "
                "WHERE name = ? AND (holder = ? OR until < ?)",
                (holder, now + seconds, name, holder, now),
            )
            if cursor.rowcount:
                return True
            if conn.execute("SELECT 1 FROM task_leases WHERE name = ?", (name,)).fetchall():
                return False
            conn.execute(
                "INSERT INTO task_leases (name, holder, until) VALUES (?, ?, ?)",
                (name, holder, now + seconds),
            )
            return True

    def dead_executors(self, silent_for: float) -> list[str]:
        """Executors with no heartbeat for ``silent_for`` seconds that still hold running tasks
        (a pending one's executor may be a past run's: a revived child not yet started)."""
        self.flush()
        rows = self.store.query(
            "SELECT DISTINCT t.executor AS executor FROM tasks t "
            "LEFT JOIN task_executors e ON e.id = t.executor "
            "WHERE t.engine = 'dbos' AND t.status IN ('running', 'waiting') "
            "AND t.executor IS NOT NULL AND (e.id IS NULL OR e.beat_at < ?)",
            (time.time() - silent_for,),
        )
        return [row["executor"] for row in rows]

    def active_runs(self) -> list[dict[str, Any]]:
        """Every pending or running task of the DBOS engine (``id``, ``status``, ``run_epoch``):
        what the reaper checks against the workflows DBOS holds. Local-engine tasks (a run
        on the local engine may share this store) are not: no workflow ever runs them."""
        self.flush()
        rows = self.store.query(
            "SELECT id, status, run_epoch FROM tasks WHERE engine = 'dbos'" + _STILL_ACTIVE
        )
        return [dict(row) for row in rows]

    def running_on(self, executor: str) -> list[dict[str, Any]]:
        self.flush()
        rows = self.store.query(
            "SELECT * FROM tasks WHERE executor = ? AND status IN ('running', 'waiting')",
            (executor,),
        )
        return [dict(row) for row in rows]

    def lose(self, task_id: str, status: str, reason: str, *, epoch: int | None = None) -> bool:
        """End ``task_id`` ``lost`` if it is still active (its ``status`` event only then, in
        the same transaction); ``False`` when another process ended it first. ``epoch``: only
        that run of it (``False`` when a later run started), named in the event."""
        self.flush()
        now = time.time()
        run = "" if epoch is None else " AND run_epoch = ?"
        with self.store.transaction() as conn:
            cursor = conn.execute(
                "UPDATE tasks SET status = ?, residency = ?, error = ?, finished_at = ?, "
                "updated_at = ? WHERE id = ?" + run + _STILL_ACTIVE,
                (str(TaskStatus.LOST), str(Residency.DISPOSED), redact(reason), now, now,
                 task_id, *(() if epoch is None else (epoch,))),
            )  # fmt: skip
            if not cursor.rowcount:
                return False
            payload: dict[str, Any] = {"from": status, "to": "lost"}
            if epoch is not None:
                payload["epoch"] = epoch
            payload["why"] = redact(reason)
            data = json.dumps(payload, ensure_ascii=False)
            conn.execute(_INSERT_EVENT, (task_id, "status", data, now, task_id))
        # a request it waited on will not be waited on any more (kernos.tasks._approvals)
        ApprovalStore(self.store).expire_task(task_id, "the task was lost: " + reason)
        return True


def _task_of_session(conn: Any, session_id: str) -> str | None:
    """The id of the task whose child session is ``session_id`` (``None``: no task's)."""
    found = (
        conn.execute(  # child sessions are named after their tasks: by key first
            "SELECT id FROM tasks WHERE id = ? AND child_session = ?",
            ("t_" + session_id.removeprefix("s_"), session_id),
        ).fetchall()
        or conn.execute(
            "SELECT id FROM tasks WHERE child_session = ? ORDER BY created_at LIMIT 1",
            (session_id,),
        ).fetchall()
    )
    return str(found[0][0]) if found else None
