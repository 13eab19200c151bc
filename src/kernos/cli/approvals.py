"""``kernos approvals [--json]``, ``kernos approve ID``, ``kernos deny ID [--reason TEXT]``: the
approval requests of this store (a background child's asked calls, waiting for a person), and
answering one from any process that shares the store. The first answer wins; a later one is told
who answered and how."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from kernos.runtime import StoredRequest

from kernos.cli._common import ConfigOption, config_errors, fail, open_runtime, write_stdout
from kernos.cli._table import age, one_line, table

HEADER = ("REQUEST", "TASK", "TOOL", "AGENT", "ASKED", "ARGUMENTS")
HISTORY_HEADER = ("REQUEST", "STATE", "TOOL", "AGENT", "ASKED", "ANSWERED", "ARGUMENTS")


def register(app: typer.Typer) -> None:
    @app.command("approvals")
    def approvals_command(
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
        every: Annotated[
            bool,
            typer.Option(
                "--all",
                "--history",
                help="Answered requests too (the terminal's, the flags', an MCP host's), "
                "newest first.",
            ),
        ] = False,
        limit: Annotated[
            int, typer.Option("--limit", min=1, help="With --all: at most this many.")
        ] = 50,
    ) -> None:
        """The open approval requests: calls of background children waiting for a person
        (answer with kernos approve ID / kernos deny ID); --all: every asked call and who
        answered it, how and when."""
        from kernos.runtime import ApprovalStore, describe_arguments

        runtime = open_runtime(config, store=True)
        try:
            with config_errors():
                approvals = ApprovalStore(runtime.store)
                requests = approvals.history(limit) if every else approvals.open_requests()
        finally:
            runtime.close()
        if as_json:
            document = {"requests": [r.as_json() for r in requests]}
            write_stdout(json.dumps(document, ensure_ascii=False, default=str))
            return
        if not requests:
            write_stdout("(no approval requests)" if every else "(no open approval requests)")
            return
        now = time.time()
        if every:
            write_stdout(
                table(
                    HISTORY_HEADER,
                    [
                        (
                            r.id,
                            str(r.state),
                            r.tool,
                            r.agent,
                            age(r.asked_at, now),
                            answered_line(r),
                            one_line(" ".join(describe_arguments(r.arguments).split()), 40),
                        )
                        for r in requests
                    ],
                )
            )
            return
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


def answered_line(request: StoredRequest) -> str:
    """Who answered ``request``, how, and the reason, in one short cell (``-``: still open)."""
    if request.answered_at is None:
        return "-"
    parts = [request.answered_by or "", f"({request.answered_how})" if request.answered_how else ""]
    text = " ".join(p for p in parts if p) or "-"
    return one_line(text + (f": {request.reason}" if request.reason else ""), 50)


def _answer(request_id: str, approved: bool, reason: str | None, config: Path | None) -> None:
    from kernos.runtime import ApprovalStore, already_answered, user_name

    runtime = open_runtime(config, store=True)
    how = "kernos approve" if approved else "kernos deny"
    try:
        with config_errors():
            won, request = ApprovalStore(runtime.store).answer(
                request_id.strip(), approved, by=user_name(), how=how, reason=reason
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
