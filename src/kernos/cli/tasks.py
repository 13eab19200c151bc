"""``kernos tasks list | show ID | output ID [--tail N] | cancel ID``: the task store from the
command line. Every command first marks the tasks of dead processes ``lost``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from kernos.cli._common import (
    EXIT_FAILED,
    EXIT_USAGE,
    ConfigOption,
    config_errors,
    fail,
    open_runtime,
    write_stdout,
)

if TYPE_CHECKING:
    from kernos.tasks import TaskStore

TaskId = Annotated[str, typer.Argument(help="A task id (t_…).")]


@contextmanager
def _store(config: ConfigOption) -> Iterator[TaskStore]:
    from kernos.tasks import TaskStore

    runtime = open_runtime(config, store=True)
    try:
        with config_errors():  # a damaged store (a task table missing) is exit 2 with the fix
            store = TaskStore(runtime.store)
            store.reconcile()
        yield store
    finally:
        runtime.close()


#: SQLite's largest integer: the most ``--limit`` can mean.
_MAX_LIMIT = 2**63 - 1


def _unknown(task_id: str) -> typer.Exit:
    return fail(f"no task {task_id} in the store; see `kernos tasks list`", EXIT_USAGE)


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if stamp else "-"


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Inspect and cancel sub-agent tasks.", no_args_is_help=True)

    @group.command("list")
    def list_command(
        config: ConfigOption = None,
        limit: Annotated[int, typer.Option("--limit", "-n", help="How many, newest first.")] = 50,
    ) -> None:
        """One line per task: id, status, residency, run epoch, target, label."""
        if not 1 <= limit <= _MAX_LIMIT:
            raise fail(f"--limit must be between 1 and {_MAX_LIMIT}; got {limit}")
        with _store(config) as store:
            rows = store.recent(limit)
            lines = [
                "\t".join(
                    [
                        row["id"],
                        row["status"],
                        row["residency"],
                        f"epoch {row['run_epoch']}",
                        f"{row['target_kind']}:{row['target']}",
                        row["name"] or "-",
                        row["label"],
                        _when(row["created_at"]),
                    ]
                )
                for row in rows
            ]
            write_stdout("\n".join(lines) if lines else "(no tasks)")

    @group.command("show")
    def show_command(task_id: TaskId, config: ConfigOption = None) -> None:
        """The task's record, its final text and its state changes."""
        from kernos.tasks import render_event, render_output

        with _store(config) as store:
            row = store.get(task_id)
            if row is None:
                raise _unknown(task_id)
            changes = [
                e for e in store.events(task_id) if e["type"] in ("status", "revived", "residency")
            ]
            history = [
                f"  {_when(e['created_at'])} {render_event(e['type'], e['payload'])}"
                for e in changes
            ]
            write_stdout("\n".join([render_output(row, [], "status", 0), "history:", *history]))

    @group.command("output")
    def output_command(
        task_id: TaskId,
        config: ConfigOption = None,
        tail: Annotated[int | None, typer.Option("--tail", help="Only the last N lines.")] = None,
    ) -> None:
        """The task's transcript (all of it, or the last N lines)."""
        with _store(config) as store:
            if store.get(task_id) is None:
                raise _unknown(task_id)
            lines = store.transcript(task_id)
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

    app.add_typer(group, name="tasks")
