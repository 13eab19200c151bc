"""``kernos sessions [--json] [-n N]``: the conversations ``kernos run --continue`` and
``--session ID`` can pick up, most recently active first."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from kernos.cli._common import ConfigOption, config_errors, fail, open_runtime, write_stdout
from kernos.cli._table import age, count, one_line, table

#: the keys of each session in ``--json`` (stable; times are seconds since the epoch)
JSON_KEYS = (
    "id", "agent", "model", "turns", "input_tokens", "output_tokens", "started_at",
    "last_active", "first_prompt",
)  # fmt: skip


def register(app: typer.Typer) -> None:
    @app.command("sessions")
    def sessions_command(
        limit: Annotated[
            int, typer.Option("--limit", "-n", help="Show at most N sessions (0: all).")
        ] = 20,
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """The sessions of this store: id, agent, model, turns, tokens (the session's own input +
        output, a failed run's included, its children's not), ages, first prompt."""
        from kernos.runtime import list_sessions

        if limit < 0:
            raise fail(f"-n {limit} is negative; pass how many sessions to show, or 0 for all")
        runtime = open_runtime(config, store=True)
        try:
            with config_errors():
                rows = list_sessions(runtime.store, limit or None)
        finally:
            runtime.close()
        if as_json:
            document = {"sessions": [{key: row[key] for key in JSON_KEYS} for row in rows]}
            write_stdout(json.dumps(document, ensure_ascii=False))
            return
        if not rows:
            write_stdout("(no sessions)")
            return
        now = time.time()
        # a session's own responses; children are in `kernos usage --by task`
        header = (
            "ID", "AGENT", "MODEL", "TURNS", "TOKENS (IN+OUT)", "STARTED", "LAST ACTIVE", "PROMPT",
        )  # fmt: skip
        body = [
            (
                row["id"],
                row["agent"],
                row["model"] or "-",
                count(row["turns"]),
                count(row["input_tokens"] + row["output_tokens"]),
                age(row["started_at"], now),
                age(row["last_active"], now),
                one_line(row["first_prompt"], 48),
            )
            for row in rows
        ]
        write_stdout(table(header, body))
