"""``kernos config check``: load everything a run would, one line per problem with its fix."""

from __future__ import annotations

from typing import Annotated

import typer

from kernos.cli._common import EXIT_OK, EXIT_USAGE, ConfigOption, err, write_stdout


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Check the configuration.", no_args_is_help=True)

    @group.command("check")
    def check_command(
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """Load the config, agent files, models, channels and tools, start every MCP server and
        list its tools; print one line per problem with its fix (exit 2), else exit 0."""
        import asyncio
        import json

        from kernos._check import check_config, report_record, rule_lines, window_lines

        report = asyncio.run(check_config(config))
        if as_json:
            write_stdout(json.dumps(report_record(report), ensure_ascii=False))
        else:
            for problem in report.problems:
                write_stdout(str(problem))
        if not report.ok:
            count = len(report.problems)
            err.print(f"{count} problem{'s' if count != 1 else ''} found", markup=False)
            raise typer.Exit(EXIT_USAGE)
        shown = ", ".join(f"{n} {what}" for what, n in report.checked.items())
        where = report.config_path or "no kernos.toml (defaults)"
        err.print(f"config OK: {where}: {shown}", markup=False)
        if not as_json:
            for line in rule_lines(report.rules):
                err.print(line, markup=False)
            for line in window_lines(report.windows):
                err.print(line, markup=False)
        raise typer.Exit(EXIT_OK)

    @group.command("reference")
    def reference_command(
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """Print every table and key of kernos.toml with its default and the commands that read
        it, as Markdown (docs/config.md is this output)."""
        import json

        from kernos.runtime import config_reference, reference_record, render_reference

        tables = config_reference()
        if as_json:
            write_stdout(json.dumps(reference_record(tables), ensure_ascii=False))
        else:
            write_stdout(render_reference(tables))
        raise typer.Exit(EXIT_OK)

    app.add_typer(group, name="config")
