"""``kernos worker``: execute sub-agent tasks from the shared DBOS queues, and nothing else.

Any number of workers, on any hosts, share the queues of one store (Postgres; or SQLite on one
host): each child runs where a worker has room under its model's global limit. A child's granted
tools are rebuilt here from this worker's config. On SIGTERM (exit 0) or SIGINT (exit 130) it stops
taking children; the ones it was running are left to the crash rule (``[tasks] on_crash``):
``resume`` (the default on Postgres) leaves them to another worker, or to this one's restart, which
resumes each from its last completed step; ``lost`` ends them ``lost``. Its clean-up (the records
of finished workflows, its executor row, DBOS's threads) may take ``--grace`` seconds; past that
it prints every thread's stack (where it was waiting) and exits 1, as a kill would leave it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from kernos.cli._common import (
    EXIT_OK,
    ConfigOption,
    config_errors,
    err,
    fail,
    open_runtime,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from kernos.runtime import Runtime
    from kernos.tasks import TaskRecord


async def serve_worker(runtime: Runtime, models: list[str] | None, quiet: bool = False) -> None:
    """Execute children from the queues of ``models`` (default: every model) until cancelled;
    one stderr line when a child is taken and one when it ends (none with ``quiet``)."""
    import asyncio  # on first use: start-up stays light (tests/test_startup.py)
    import time

    from kernos._app import TOOLSETS, _task_toolset, agent_session, child_tools
    from kernos.tasks import DBOSEngine, TaskManager, queue_name

    listen = [queue_name(m) for m in models] if models else None
    factories = tuple(f for f in TOOLSETS if f is not _task_toolset)
    async with agent_session(runtime, "main", toolsets=factories, record_turns=False) as (
        session,
        opened,
    ):
        manager = TaskManager(
            runtime,
            engine=lambda s: DBOSEngine(s, listen=listen, worker=True),
            agent_tools=await child_tools(runtime, opened),
        )
        manager.remote_tools = {
            name: spec for name, spec in session.tools.items() if not name.startswith("task")
        }
        engine = manager.engine
        assert isinstance(engine, DBOSEngine)
        if not quiet:
            engine.on_child = _child_lines(engine.executor, time.monotonic)
        await engine.ready()
        where = ", ".join(listen) if listen is not None else "every model's queue"
        err.print(f"worker {engine.executor} executing {where}", markup=False, highlight=False)
        try:
            await asyncio.Event().wait()
        finally:
            left = len(engine.leave())  # to the crash rule, not cancelled
            await manager.aclose(wait=True)
            fate = "left to other workers to resume" if engine.on_crash == "resume" else "lost"
            plural = "child" if left == 1 else "children"
            err.print(
                f"worker {engine.executor} stopped; {left} running {plural} {fate}",
                markup=False, highlight=False,
            )  # fmt: skip


def _child_lines(executor: str, clock: Callable[[], float]) -> Callable[[str, TaskRecord], None]:
    from kernos.tasks import ended_line, took_line

    started: dict[str, float] = {}

    def say(kind: str, record: TaskRecord) -> None:
        label = record.name or record.label
        if kind == "took":
            started[record.id] = clock()
            line = took_line(executor, record.id, label, record.model_name)
        else:
            seconds = clock() - started.pop(record.id, clock())
            line = ended_line(
                executor, record.id, label, record.model_name, str(record.status), seconds,
                record.leave,
            )  # fmt: skip
        err.print(line, markup=False, highlight=False, soft_wrap=True)

    return say


#: how long a stopping worker's clean-up may take by default (a container's usual grace period)
GRACE = "30s"


def register(app: typer.Typer) -> None:
    @app.command("worker")
    def worker_command(
        config: ConfigOption = None,
        models: Annotated[
            str | None,
            typer.Option(
                "--models",
                metavar="MODEL,MODEL",
                help="Execute only these models' queues, e.g. openai-chat:qwen3,fast (model "
                "strings or aliases; default: every model's).",
            ),
        ] = None,
        grace: Annotated[
            str,
            typer.Option(
                "--grace",
                help="How long a stop's clean-up may take (e.g. 30s, 2m); then the worker "
                "prints every thread's stack and exits 1.",
            ),
        ] = GRACE,
        quiet: Annotated[
            bool,
            typer.Option(
                "--quiet", "-q", help="No line per child (taken, ended); start and stop only."
            ),
        ] = False,
    ) -> None:
        """Execute sub-agent tasks from the shared queues (the DBOS engine) until stopped.

        SIGTERM (exit 0) or SIGINT (exit 130) stops taking new children. With
        \\[tasks] on_crash = "resume" (the PostgreSQL default) the running ones
        are left to another worker, or to this one's restart, to resume from
        their last step; with "lost" they end lost. A clean-up that takes
        longer than --grace seconds is cut short: the worker prints where it
        was waiting and exits 1.
        """
        import asyncio
        import faulthandler
        import signal
        import sys

        from kernos._app import Interrupted, run_until_signal

        chosen = [m.strip() for m in (models or "").split(",") if m.strip()] or None
        if models is not None and chosen is None:
            raise fail("--models is empty; name at least one model, or leave it out for all")
        from kernos.runtime import DURATION_FIX, parse_duration

        try:
            seconds = parse_duration(grace)
        except ValueError as exc:
            raise fail(f"--grace: {exc}; {DURATION_FIX}") from None
        if seconds <= 0:
            raise fail('--grace must be more than 0; write a duration such as "30s" or "2m"')
        runtime = open_runtime(config, store=True)

        def deadline(signum: int) -> None:
            # a watchdog thread of the interpreter's own: it fires even while this thread is
            # blocked (a lock another process holds, a thread DBOS cannot join)
            err.print(
                f"worker: stopping (its clean-up may take {seconds:g} s)", markup=False,
                highlight=False,
            )  # fmt: skip
            sys.stderr.flush()
            faulthandler.dump_traceback_later(seconds, exit=True)

        try:
            with config_errors():
                asyncio.run(
                    run_until_signal(serve_worker(runtime, chosen, quiet), on_signal=deadline)
                )
        except Interrupted as stop:
            code = EXIT_OK if stop.signum == signal.SIGTERM else stop.exit_code
            raise typer.Exit(code) from None
        finally:
            runtime.close()
            faulthandler.cancel_dump_traceback_later()
