"""``kernos sessions [--json] [-n N]``: the conversations ``kernos run --continue`` and
``--session ID`` can pick up, most recently active first."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from kernos.cli._common import (
    ConfigOption,
    config_errors,
    err,
    fail,
    open_runtime,
    write_stdout,
)
from kernos.cli._table import age, count, one_line, table

#: the keys of each session in ``--json`` (stable; times are seconds since the epoch)
JSON_KEYS = (
    "id", "agent", "model", "turns", "input_tokens", "output_tokens", "started_at",
    "last_active", "first_prompt",
)  # fmt: skip


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="The sessions of this store, and one session's transcript (show ID).",
        invoke_without_command=True,
    )

    @group.callback()
    def sessions_command(
        ctx: typer.Context,
        limit: Annotated[
            int, typer.Option("--limit", "-n", help="Show at most N sessions (0: all).")
        ] = 20,
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """The sessions of this store: id, agent, model, turns, tokens (the session's own input +
        output, a failed run's included, its children's not), ages, first prompt."""
        if ctx.invoked_subcommand is None:
            _list(limit, config, as_json)

    @group.command("show")
    def show_command(
        session_id: Annotated[
            str, typer.Argument(help="A session id (s_…), or a task id (t_…): its child's session.")
        ],
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """A session's transcript (turns, tool calls and results), its compactions with each
        declared loss, then the tasks it spawned."""
        from kernos.cli.tasks import task_record
        from kernos.runtime import compaction_text, compactions, get_session, session_events
        from kernos.tasks import TaskStore, child_session_row, render_event

        runtime = open_runtime(config, store=True)
        try:
            with config_errors():
                row = get_session(runtime.store, session_id)
                if row is None and session_id.startswith("t_"):
                    row = child_session_row(TaskStore(runtime.store), session_id)
                if row is None:
                    raise fail(
                        f"there is no session {session_id} in this store ({runtime.home}); "
                        "`kernos sessions` lists them"
                    )
                session_id = row["id"]
                turns = runtime.store.turns(session_id)
                events = session_events(turns)
                compacted = compactions(runtime.store, session_id)
                children = TaskStore(runtime.store).children(session_id)
        finally:
            runtime.close()
        if as_json:
            document = {
                "session": {key: row[key] for key in JSON_KEYS},
                "events": [
                    {"type": kind, "text": render_event(kind, payload), "payload": payload}
                    for kind, payload in events
                ],
                "compactions": [_compaction_json(c) for c in compacted],
                "children": [task_record(child) for child in children],
            }
            write_stdout(json.dumps(document, ensure_ascii=False, default=str))
            return
        lines = [line for kind, payload in events for line in _lines(render_event(kind, payload))]
        lines += [line for c in compacted for line in _lines(compaction_text(c))]
        lines += [
            f"[task] {c['id']} {c['status']} {c['target_kind']}:{c['target']} — {c['label']}"
            for c in children
        ]
        write_stdout("\n".join(lines) if lines else "(no turns)")

    @group.command("compact")
    def compact_command(
        session_id: Annotated[str, typer.Argument(help="A session id (s_…).")],
        config: ConfigOption = None,
    ) -> None:
        """Compact a session now: its middle turns become one approved summary with declared
        losses (the first prompt and the last keep_turns turns stay); the store keeps them."""
        import asyncio

        from kernos._app import compact_session
        from kernos.errors import ContextExhausted

        runtime = open_runtime(config, store=True)
        try:
            with config_errors():
                done = asyncio.run(compact_session(runtime, session_id))
        except ContextExhausted as exc:
            raise fail(str(exc), 1) from None
        finally:
            runtime.close()
        if done is None:
            err.print(
                f"session {session_id}: no turn to compact (the first prompt and the last "
                "keep_turns turns stay as they are)",
                markup=False,
            )
            return
        saved = (done.tokens_before - done.tokens_after) / done.tokens_before
        err.print(
            f"session {session_id}: compacted turns {done.first_turn}–{done.last_turn}, "
            f"{done.tokens_before} → {done.tokens_after} tokens ({saved:.1%} smaller), "
            f"{done.losses} declared loss(es); `kernos sessions show {session_id}` lists them",
            markup=False,
        )

    app.add_typer(group, name="sessions")


#: the keys of each compaction in ``show --json``
COMPACTION_KEYS = (
    "first_turn", "last_turn", "status", "tokens_before", "tokens_after", "ratio", "model",
    "drafts", "losses", "verdict", "reason", "created_at",
)  # fmt: skip


def _compaction_json(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row.get(key) for key in COMPACTION_KEYS}


def _lines(text: str) -> list[str]:
    return text.splitlines() or [""]


def _list(limit: int, config: ConfigOption, as_json: bool) -> None:
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
