"""``kernos approvals [--json]``, ``kernos approve ID``, ``kernos deny ID [--reason TEXT]``: the
approval requests of this store (a background child's asked calls, waiting for a person), and
answering one from any process that shares the store. The first answer wins; a later one is told
who answered and how."""

from __future__ import annotations

import getpass
import json
import time
from pathlib import Path
from typing import Annotated

import typer

from kernos.cli._common import ConfigOption, config_errors, fail, open_runtime, write_stdout
from kernos.cli._table import age, one_line, table

HEADER = ("REQUEST", "TASK", "TOOL", "AGENT", "ASKED", "ARGUMENTS")


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown user"


def register(app: typer.Typer) -> None:
    @app.command("approvals")
    def approvals_command(
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """The open approval requests: calls of background children waiting for a person
        (answer with kernos approve ID / kernos deny ID)."""
        from kernos.runtime import ApprovalStore, describe_arguments

        runtime = open_runtime(config, store=True)
        try:
            with config_errors():
                requests = ApprovalStore(runtime.store).open_requests()
        finally:
            runtime.close()
        if as_json:
            document = {"requests": [r.as_json() for r in requests]}
            write_stdout(json.dumps(document, ensure_ascii=False, default=str))
            return
        if not requests:
            write_stdout("(no open approval requests)")
            return
        now = time.time()
        rows = [
            (
                r.id,
                r.task_id or "-",
                r.tool,
                r.agent,
                age(r.asked_at, now),
                one_line(" ".join(describe_arguments(r.arguments).split()), 60),
            )
            for r in requests
        ]
        write_stdout(table(HEADER, rows))

    @app.command("approve")
    def approve_command(
        request_id: Annotated[str, typer.Argument(help="An approval request id (a_…).")],
        config: ConfigOption = None,
    ) -> None:
        """Approve a waiting call: the child runs the tool and goes on."""
        _answer(request_id, True, None, config)

    @app.command("deny")
    def deny_command(
        request_id: Annotated[str, typer.Argument(help="An approval request id (a_…).")],
        reason: Annotated[
            str | None, typer.Option("--reason", help="Why; the model reads it and adapts.")
        ] = None,
        config: ConfigOption = None,
    ) -> None:
        """Deny a waiting call: the child's model reads the denial (and the reason) and goes on."""
        _answer(request_id, False, reason, config)


def _answer(request_id: str, approved: bool, reason: str | None, config: Path | None) -> None:
    from kernos.runtime import ApprovalStore, already_answered

    runtime = open_runtime(config, store=True)
    how = "kernos approve" if approved else "kernos deny"
    try:
        with config_errors():
            won, request = ApprovalStore(runtime.store).answer(
                request_id.strip(), approved, by=_who(), how=how, reason=reason
            )
    finally:
        runtime.close()
    if request is None:
        raise fail(
            f"there is no approval request {request_id} in this store ({runtime.home}); "
            "`kernos approvals` lists the open ones"
        )
    if not won:
        raise fail(already_answered(request))
    verb = "approved" if approved else "denied"
    write_stdout(f"{request.id} {verb}: {request.tool} of task {request.task_id or '-'}")
