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

import json
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kernos.cli._watch_keys import REASON_PROMPT as REASON_PROMPT
from kernos.cli._watch_screen import Screen as _Screen
from kernos.cli._watch_view import POLL_SECONDS, document, plain
from kernos.tasks import SessionUsage, TeamStore, task_tree, tree_signature

if TYPE_CHECKING:
    from kernos.tasks import TaskStore, TreeRow

#: how often the dead owners' tasks are marked ``lost``, in seconds
RECONCILE_SECONDS = 2.0


# -- reading the store -------------------------------------------------------------------------


class Source:
    """The store as the view reads it: a cheap change check, then the rows and usage sums."""

    def __init__(self, store: TaskStore, limit: int) -> None:
        self.tasks = store
        self.teams: TeamStore = TeamStore(store.store)
        self.limit = limit
        self._usage: dict[str, SessionUsage] = {}
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
            self._usage[row["session_id"]] = self._usage.get(
                row["session_id"], SessionUsage()
            ).plus(row)
            self._usage_seen = max(self._usage_seen, int(row["id"]))

    def rows(self, now: float) -> list[TreeRow]:
        return task_tree(self._rows, self._usage, now, self._teams)

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
        if tree_signature(rows) != shown:
            if as_json:
                write(json.dumps(document(rows, now)))
            else:
                write(("\n" if shown is not None else "") + plain(rows))
            shown = tree_signature(rows)
        time.sleep(POLL_SECONDS)
    return signalled[0]
