"""``kernos demo``: the whole kernel, offline, driven by bundled cassettes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from kernos.cli._common import EXIT_FAILED, EXIT_OK, LazyConsole, config_errors

if TYPE_CHECKING:
    from rich.console import Console

    from kernos.runtime import SessionEvent

out = cast("Console", LazyConsole(highlight=False, soft_wrap=True))


def escape(text: str) -> str:
    from rich.markup import escape as escape_markup

    return escape_markup(text)


def _short(value: object, limit: int = 150) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return escape(text if len(text) <= limit else text[: limit - 3] + "...")


def _show(event: SessionEvent) -> None:
    if event.agent != "main" or event.kind not in ("tool_call", "tool_result"):
        return
    if event.kind == "tool_call":
        name, args = event.data["name"], event.data["args"]
        out.print(f"  [bold]model →[/] {name} {_short(args, 400)}")
        from kernos.tasks import normalize_task_arguments
        from kernos.tools import BUILTIN_PREPARE

        normalize = normalize_task_arguments if name == "task" else BUILTIN_PREPARE.get(name)
        if normalize is not None:
            out.print(f"  [bold]kernos normalized →[/] {_short(normalize(args), 400)}")
    else:
        result = event.data["result"]
        mark = f"[red]✗ {result.code}[/]" if result.is_error else "[green]✓[/]"
        out.print(f"  [bold]kernos ←[/] {mark} {_short(result.text, 300)}")


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo_command(
        workspace: Annotated[
            Path | None,
            typer.Option(
                "--workspace",
                help="Keep the demo's files (config, store, log, compressed prompt) here.",
            ),
        ] = None,
    ) -> None:
        """Run kernos offline on replayed model turns: padded tasks, a batch send, a compression."""
        from kernos._demo import PROMPT, run_demo

        out.print(
            "[bold]kernos demo[/] — the model's turns are [bold]replayed from bundled "
            "cassettes[/]; every tool call runs through the real kernos code (no key, no network)."
        )
        import asyncio
        import tempfile

        with tempfile.TemporaryDirectory(prefix="kernos-demo-") as temp:
            where = workspace.resolve() if workspace else Path(temp)
            out.print(f"\n[bold]1. kernos run[/] {PROMPT!r}")
            out.print(
                "   (the model pads every optional field, GPT-style: first a built-in read_file "
                "call, then task calls)"
            )
            with config_errors():
                result = asyncio.run(run_demo(where, on_event=_show))
            out.print("\n[bold]Sub-agent tasks[/] (from the store, .kernos/kernos.db):")
            for task in result.tasks:
                out.print(
                    f"  {task['id']}  {task['status']:<9}  "
                    f"{task['target_kind'] + ':' + task['target']:<16}  {_short(task['label'], 60)}"
                )
            out.print("\n[bold]Output receipt[/] (what the model read):")
            for line in result.receipt.splitlines():
                out.print(f"  {escape(line)}")
            out.print(f"  out/log.jsonl holds {len(result.log_lines)} line(s):")
            for entry in result.log_lines:
                out.print(
                    f"    {entry['type']}: {_short(entry['payload'], 80)}  meta={entry['meta']}"
                )
            out.print(f"\n[bold]Final answer:[/] {escape(result.outcome.text)}")
            if result.outcome.error:
                out.print(f"[red]run failed:[/] {escape(result.outcome.error)}")

            report = result.compress
            out.print("\n[bold]2. kernos compress[/] release_prompt.md -o release_prompt.min.md")
            metrics = report.metrics
            if metrics is not None:
                out.print(
                    f"  {report.status.value}: {metrics.source_words} → {metrics.draft_words} "
                    f"words, {metrics.source_tokens} → {metrics.draft_tokens} tokens o200k_base "
                    f"({metrics.percent}% smaller), {report.rounds} draft(s)"
                )
            for loss in report.losses:
                out.print(f"  declared loss: {_short(loss.content, 120)}")
                out.print(f"    because: {_short(loss.reason, 200)}")
            if report.verdict:
                out.print(f"  verdict: {_short(report.verdict, 300)}")
            if report.text:
                out.print("  written text:")
                for line in report.text.splitlines():
                    out.print(f"    {escape(line)}")
            if workspace:
                out.print(f"\nFiles kept in {where}")
        out.print(
            "\nRun the same with a real model: write a kernos.toml like the demo's (see "
            "`kernos demo --workspace DIR`), then\n"
            f"  kernos run {PROMPT!r} -m openai-chat:MODEL\n"
            "  kernos compress release_prompt.md -o release_prompt.min.md -m openai-chat:MODEL\n"
            "with OPENAI_BASE_URL/OPENAI_API_KEY pointing at any OpenAI-compatible server."
        )
        ok = (
            result.outcome.ok
            and all(t["status"] == "completed" for t in result.tasks)
            and report.status.value == "approved"
        )
        raise typer.Exit(EXIT_OK if ok else EXIT_FAILED)
