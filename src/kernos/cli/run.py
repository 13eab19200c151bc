"""``kernos run``: one prompt to an agent; the final answer alone on stdout."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from kernos.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    ConfigOption,
    ModelOption,
    config_errors,
    err,
    fail,
    open_runtime,
    write_stdout,
)

if TYPE_CHECKING:
    from kernos.runtime import SessionEvent


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def activity(event: SessionEvent) -> None:
    """Tool activity on stderr, one short line each; model text is shown as written (no markup)."""
    who = Text(event.agent if event.agent == "main" else f"{event.agent}/{event.session_id}", "dim")
    if event.kind == "tool_call":
        args = event.data.get("args")
        shown = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)
        err.print(Text.assemble(who, " → ", str(event.data["name"]), " ", _clip(shown)))
    elif event.kind == "tool_result":
        result = event.data["result"]
        first = result.text.strip().splitlines()[0] if result.text.strip() else ""
        mark = Text(f"✗ {result.code}", "red") if result.is_error else Text("✓", "green")
        err.print(Text.assemble(who, " ", mark, " ", _clip(first)))


class AnswerStream:
    """Writes the agent's streamed text to stdout as it arrives (``--stream``).

    Text written while background children are still running is held back (more turns will
    follow, so it is not the final answer); other text is written as it comes, answers separated
    by a newline. :meth:`finish` then writes the final answer unless it was the last text
    streamed (a model that cannot stream, an answer held back), so stdout always ends with the
    final answer and a newline.
    """

    def __init__(self) -> None:
        self.current: list[str] = []
        self.last = ""
        self.any = False

    def __call__(self, event: SessionEvent) -> None:
        if event.kind == "delta":
            if event.data.get("background"):
                return  # not the last answer: children are running, their news comes next
            if not self.current and self.any:
                _write("\n")  # a new answer after an earlier one
            self.current.append(event.data["text"])
            self.any = True
            _write(event.data["text"])
        elif event.kind in ("tool_call", "text"):
            if self.current:
                self.last = "".join(self.current)  # one answer is complete
            self.current = []

    def finish(self, final: str) -> None:
        if self.current:
            self.last = "".join(self.current)
            self.current = []
        if self.any and self.last == final:
            _write("\n")
        elif final:
            if self.any:
                _write("\n")
            write_stdout(final)
        elif self.any:
            _write("\n")


def _write(text: str) -> None:
    """Streamed text on stdout, flushed; unencodable characters replaced, never a crash."""
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        sys.stdout.write(text.encode(encoding, errors="replace").decode(encoding))
    sys.stdout.flush()


def _say_interrupted(signum: int) -> None:
    name = signal.Signals(signum).name
    err.print(f"{name} received: cancelling running tasks and stopping", markup=False)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_command(
        prompt: Annotated[str, typer.Argument(help="What to ask the agent; '-' reads stdin.")],
        model: ModelOption = None,
        agent: Annotated[str, typer.Option("--agent", "-a", help="Agent to run.")] = "main",
        config: ConfigOption = None,
        record: Annotated[
            Path | None, typer.Option("--record", help="Write the model's turns to a cassette.")
        ] = None,
        no_wait: Annotated[
            bool,
            typer.Option("--no-wait", help="Exit at the first idle; unfinished children are lost."),
        ] = False,
        quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help="No activity on stderr.")
        ] = False,
        stream: Annotated[
            bool,
            typer.Option(
                "--stream/--no-stream",
                help="Write the answer to stdout as it arrives (--no-stream: once, at the end).",
            ),
        ] = True,
    ) -> None:
        """Run an agent on PROMPT: the final answer goes to stdout, activity to stderr."""
        from kernos._app import Interrupted, run_agent, run_until_signal

        if prompt == "-":
            prompt = sys.stdin.read()
        if not prompt.strip():
            raise fail("PROMPT is empty; pass what the agent should do")
        runtime = open_runtime(config, model, record, store=True)
        from kernos.cli._usage_store import UsageRecorder

        with config_errors():
            usage = UsageRecorder(runtime.store)

        streamed = AnswerStream()

        def on_event(event: SessionEvent) -> None:
            usage(event)
            if stream:
                streamed(event)
            if not quiet:
                activity(event)

        try:
            with config_errors():
                runtime.config.agent(agent)
                runtime.model(runtime.model_name(agent))
                outcome = asyncio.run(
                    run_until_signal(
                        run_agent(
                            runtime,
                            prompt,
                            agent=agent,
                            wait=not no_wait,
                            on_event=on_event,
                            stream=stream,
                        ),
                        on_signal=_say_interrupted,
                    )
                )
        except Interrupted as exc:
            raise typer.Exit(exc.exit_code) from None
        finally:
            runtime.close()
        if not quiet:  # the run went to its end (an error answer included): its total
            from kernos.runtime._usage import summary_line, total

            err.print(summary_line(total(usage.priced())), markup=False)
        if stream:
            streamed.finish(outcome.text)
        elif outcome.text:
            write_stdout(outcome.text)
        if outcome.error:
            raise fail(f"the run failed: {outcome.error}", EXIT_FAILED)
        raise typer.Exit(EXIT_OK)
