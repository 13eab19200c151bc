"""``kernos usage [--since 1d] [--by model|agent|task] [--json]``: tokens and cost."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from kernos.cli._common import ConfigOption, config_errors, fail, open_runtime, write_stdout
from kernos.cli._table import count, table


def register(app: typer.Typer) -> None:
    @app.command("usage")
    def usage_command(
        since: Annotated[
            str | None, typer.Option("--since", help="Only the last span: 30m, 12h, 1d, 2w.")
        ] = None,
        by: Annotated[str, typer.Option("--by", help="Group by model, agent or task.")] = "model",
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """Tokens (input, output, cached) and cost of every model response of every session,
        children included, grouped; with --json also the tool calls the boundary repaired and
        those it rejected with a code."""
        from kernos.cli._usage_store import call_rows, usage_rows
        from kernos.runtime import (
            GROUPS,
            add_call_counts,
            aggregate,
            cost_text,
            parse_since,
            reprice,
            total,
        )

        if by not in GROUPS:
            raise fail(f"--by {by!r} is not a grouping; use one of: {', '.join(GROUPS)}")
        try:
            start = time.time() - parse_since(since) if since else None
        except ValueError as exc:
            raise fail(str(exc)) from None
        runtime = open_runtime(config, store=True)
        try:
            with config_errors():
                rows = reprice(usage_rows(runtime.store, start), runtime.config.prices())
                calls = call_rows(runtime.store, start)
        finally:
            runtime.close()
        groups, summed = aggregate(rows, by), total(rows)
        if as_json:
            add_call_counts(groups, summed, calls, by)
            document = {"by": by, "since": start, "groups": groups, "total": summed}
            write_stdout(json.dumps(document, ensure_ascii=False))
            return
        header = (by.upper(), "REQUESTS", "INPUT", "OUTPUT", "CACHED", "COST")
        body = [
            (
                g[by],
                count(g["requests"]),
                count(g["input_tokens"]),
                count(g["output_tokens"]),
                count(g["cached_tokens"]),
                cost_text(g["cost"]).removeprefix("cost "),
            )
            for g in [*groups, {**summed, by: "total"}]
        ]
        write_stdout(table(header, body))
