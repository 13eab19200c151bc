"""``kernos tasks list | show ID | output ID [--tail N] [--follow] | cancel ID | watch``: the task
store from the command line. Every command first marks the tasks of dead processes ``lost``.

``--json`` prints one JSON document on stdout with the keys documented in the README ("Scriptable
output"); the human form is a table with a header row and times as ages.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kernos.cli._common import (
    EXIT_FAILED,
    EXIT_USAGE,
    ConfigOption,
    config_errors,
    enable_file_log,
    fail,
    open_runtime,
    write_stdout,
)
from kernos.cli._table import age, one_line, table

if TYPE_CHECKING:
    from kernos.tasks import TaskStore

TaskId = Annotated[str, typer.Argument(help="A task id (t_…).")]
JsonOption = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]

#: SQLite's largest integer: the most ``--limit`` can mean.
_MAX_LIMIT = 2**63 - 1

#: how often ``--follow`` reads the store again, in seconds
FOLLOW_POLL = 0.2

#: the keys of a task in ``--json`` output, in this order
TASK_KEYS = (
    "id", "status", "residency", "run_epoch", "target_kind", "target", "model", "name", "label",
    "parent_session", "child_session", "depth", "background", "owner_pid", "error",
    "created_at", "started_at", "finished_at", "updated_at", "executor",
    "requests", "input_tokens", "output_tokens", "cached_tokens", "cost",
)  # fmt: skip

#: a task's usage keys when its session has no usage row yet
_NO_USAGE = {"requests": 0, "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "cost": 0.0}


@contextmanager
def _store(config: ConfigOption) -> Iterator[TaskStore]:
    """The task store, without the config models: these commands read the store only, so the
    config is checked just for being readable TOML (start-up stays light, and a config problem
    that concerns models or channels does not stop them)."""
    from kernos.runtime import Store, config_file, kernos_home
    from kernos.tasks import TaskStore

    with config_errors():
        _, data = config_file(config)
    if "store" in data or os.environ.get("KERNOS_STORE_URL"):
        # a store named by the config or the environment: the whole config says where
        from kernos.tasks import crash_mode  # imports asyncio: only on this path

        runtime = open_runtime(config, store=True)
        opened, close = runtime.store, runtime.close
        resume = crash_mode(runtime.config, runtime.config.store_url) == "resume"
    else:
        home = kernos_home()
        with config_errors():
            opened = Store.open(home)
        enable_file_log(home)
        close = opened.close
        tasks = data.get("tasks")
        resume = isinstance(tasks, dict) and tasks.get("on_crash") == "resume"
    try:
        with config_errors():  # a damaged store (a task table missing) is exit 2 with the fix
            store = TaskStore(opened)
            # with on_crash = "resume" a dead executor's task is DBOS's to resume, not lost
            store.resume = resume
            store.reconcile()
        yield store
    finally:
        close()


#: the task store as the ``tasks`` commands open it (``kernos teams`` reads the same)
task_store = _store


def _unknown(task_id: str) -> typer.Exit:
    return fail(f"no task {task_id} in the store; see `kernos tasks list`", EXIT_USAGE)


def task_record(row: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A task row as its ``--json`` object: the documented keys only, booleans as booleans;
    ``usage``: its child session's summed usage (what ``kernos tasks watch`` shows), the
    request count, tokens and cost (``None``: a price unknown)."""
    record = {key: row.get(key) for key in TASK_KEYS}
    record.update({key: (usage or _NO_USAGE)[key] for key in _NO_USAGE})
    record["background"] = bool(record["background"])
    return record


def _usage_of(store: TaskStore, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    from kernos.cli._usage_store import session_totals

    with config_errors():
        return session_totals(store.store, (row.get("child_session") for row in rows))


def _event_record(event: dict[str, Any]) -> dict[str, Any]:
    from kernos.tasks import render_event

    return {
        "seq": event["seq"],
        "type": event["type"],
        "at": event["created_at"],
        "text": render_event(event["type"], event["payload"]),
        "payload": event["payload"],
    }


def _dump(document: dict[str, Any]) -> None:
    write_stdout(json.dumps(document, ensure_ascii=False, default=str))


def _follow(store: TaskStore, task_id: str, tail: int | None) -> None:
    """Print the transcript, then each new line as it is written, until the task is final."""
    from kernos.tasks import ACTIVE, render_event

    seen = 0
    first = True
    while True:
        store.reconcile()  # a dead owner's task ends ``lost`` instead of being followed forever
        row = store.get(task_id)
        events = [e for e in store.events(task_id) if e["seq"] > seen]
        lines = [
            line for e in events for line in render_event(e["type"], e["payload"]).splitlines()
        ]
        if first and tail:
            lines = lines[-tail:]
        first = False
        if events:
            seen = events[-1]["seq"]
        if lines:
            write_stdout("\n".join(lines))
        if row is None or row["status"] not in ACTIVE:
            return
        time.sleep(FOLLOW_POLL)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Inspect and cancel sub-agent tasks.", no_args_is_help=True)

    @group.command("list")
    def list_command(
        config: ConfigOption = None,
        limit: Annotated[int, typer.Option("--limit", "-n", help="How many, newest first.")] = 50,
        as_json: JsonOption = False,
    ) -> None:
        """One line per task: id, status, residency, epoch, target, name, label, age, and the
        executor (host:pid) that runs or ran it."""
        if not 1 <= limit <= _MAX_LIMIT:
            raise fail(f"--limit must be between 1 and {_MAX_LIMIT}; got {limit}")
        with _store(config) as store:
            rows = store.recent(limit)
            spent = _usage_of(store, rows) if as_json else {}
        if as_json:
            _dump({"tasks": [task_record(row, spent.get(row["child_session"])) for row in rows]})
            return
        if not rows:
            write_stdout("(no tasks)")
            return
        now = time.time()
        header = (
            "ID", "STATUS", "RESIDENCY", "EPOCH", "TARGET", "NAME", "LABEL", "CREATED", "EXECUTOR",
        )  # fmt: skip
        body = [
            (
                row["id"],
                row["status"],
                row["residency"],
                str(row["run_epoch"]),
                f"{row['target_kind']}:{row['target']}",
                one_line(row["name"], 30),
                one_line(row["label"], 40),
                age(row["created_at"], now),
                row.get("executor") or "-",
            )
            for row in rows
        ]
        write_stdout(table(header, body))

    @group.command("show")
    def show_command(
        task_id: TaskId, config: ConfigOption = None, as_json: JsonOption = False
    ) -> None:
        """The task's record, its final text and its state changes."""
        from kernos.tasks import render_event, render_output

        with _store(config) as store:
            row = store.get(task_id)
            if row is None:
                raise _unknown(task_id)
            changes = [
                e for e in store.events(task_id) if e["type"] in ("status", "revived", "residency")
            ]
            spent = _usage_of(store, [row]) if as_json else {}
            if as_json:
                from kernos.tasks import TeamStore

                seat = TeamStore(store.store).membership(task_id)
        if as_json:
            usage = spent.get(row["child_session"])
            record = {**task_record(row, usage), "final_text": row["final_text"]}
            # a team member's team (its ``name`` is its name in the team); ``None``: no team
            record["team"] = seat[1] if seat else None
            _dump({"task": record, "history": [_event_record(e) for e in changes]})
            return
        now = time.time()
        history = [
            f"  {age(e['created_at'], now)} {render_event(e['type'], e['payload'])}"
            for e in changes
        ]
        executor = f"executor: {row.get('executor') or '-'} ({row.get('engine') or 'local'} engine)"
        lines = render_output(row, [], "status", 0).split("\n")
        lines.insert(3, executor)  # after the target line, before the error and final text
        write_stdout("\n".join([*lines, "history:", *history]))

    @group.command("output")
    def output_command(
        task_id: TaskId,
        config: ConfigOption = None,
        tail: Annotated[int | None, typer.Option("--tail", help="Only the last N lines.")] = None,
        follow: Annotated[
            bool,
            typer.Option("--follow", "-f", help="Keep printing new lines until the task ends."),
        ] = False,
        as_json: JsonOption = False,
    ) -> None:
        """The task's transcript (all of it, or the last N lines); --follow streams it."""
        if tail is not None and tail < 1:
            raise fail(f"--tail must be 1 or more; got {tail}")
        if follow and as_json:
            raise fail(
                "--follow streams text lines; drop --json, or drop --follow for one document"
            )
        with _store(config) as store:
            row = store.get(task_id)
            if row is None:
                raise _unknown(task_id)
            if follow:
                try:
                    _follow(store, task_id, tail)
                except KeyboardInterrupt:
                    raise typer.Exit(130) from None
                return
            events = store.events(task_id)
        if as_json:
            records = [_event_record(e) for e in events]
            _dump(
                {
                    "id": task_id,
                    "status": row["status"],
                    "events": records[-tail:] if tail else records,
                }
            )
            return
        from kernos.tasks import render_event

        lines = [
            line for e in events for line in render_event(e["type"], e["payload"]).splitlines()
        ]
        write_stdout("\n".join(lines[-tail:] if tail else lines))

    @group.command("cancel")
    def cancel_command(task_id: TaskId, config: ConfigOption = None) -> None:
        """Cancel a pending or running task (its process stops it)."""
        with _store(config) as store:
            if store.get(task_id) is None:
                raise _unknown(task_id)
            changed, message = store.cancel(task_id)
            if not changed:
                raise fail(message, EXIT_FAILED)
            write_stdout(message)

    @group.command("watch")
    def watch_command(
        config: ConfigOption = None,
        once: Annotated[
            bool, typer.Option("--once", help="Print one snapshot and exit (for scripts).")
        ] = False,
        limit: Annotated[
            int, typer.Option("--limit", "-n", help="How many tasks, newest first.")
        ] = 100,
        as_json: Annotated[
            bool, typer.Option("--json", help="Each snapshot as one JSON document per line.")
        ] = False,
    ) -> None:
        """A live view of the tasks (↑/↓ select, t transcript, c cancel, q quit); a refreshing
        table when stdout is not a terminal."""
        if not 1 <= limit <= _MAX_LIMIT:
            raise fail(f"--limit must be between 1 and {_MAX_LIMIT}; got {limit}")
        from kernos.cli._watch import watch

        with _store(config) as store:
            code = watch(store, once=once, as_json=as_json, limit=limit, write=write_stdout)
        raise typer.Exit(code)

    app.add_typer(group, name="tasks")
