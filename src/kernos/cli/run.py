"""``kernos run``: one prompt to an agent; the final answer alone on stdout."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from kernos.cli._common import (
    EXIT_OK,
    ApproveOption,
    ConfigOption,
    ContinueOption,
    Failure,
    ModelOption,
    QuietOption,
    SessionOption,
    YesOption,
    config_errors,
    err,
    fail,
    open_runtime,
    stderr_console,
    verbose,
    write_raw,
    write_stdout,
)
from kernos.cli._table import age
from kernos.errors import RunTimedOut as RunTimedOut

if TYPE_CHECKING:
    from kernos.cli._usage_store import UsageRecorder
    from kernos.runtime import ModelPrice, Runtime, SessionEvent

T = TypeVar("T")

#: ``kernos run`` stopped by ``--timeout`` (or its agent's ``timeout``), as GNU timeout(1) exits
EXIT_TIMEOUT = 124


async def capped(work: Awaitable[T], seconds: float | None) -> T:
    """Await ``work`` for at most ``seconds`` (``None``: no limit); when the time is up it is
    cancelled (its cleanup runs: children are recorded ``cancelled``) and :class:`RunTimedOut`
    is raised."""
    import asyncio

    if seconds is None:
        return await work
    deadline = asyncio.timeout(seconds)
    try:
        async with deadline:
            return await work
    except TimeoutError:
        if deadline.expired():
            raise RunTimedOut() from None
        raise


def _timeout_seconds(value: str | None) -> float | None:
    from kernos.runtime import DURATION_FIX, parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value) or None
    except ValueError as exc:
        raise fail(f"--timeout: {exc}; {DURATION_FIX}") from None


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters: whitespace (newlines included)
    collapsed to single spaces, an ellipsis where it was cut."""
    flat = " ".join(text.split())
    width = max(width, 1)
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def activity(event: SessionEvent, *, receipts: bool = False) -> None:
    """Tool activity on stderr, one short line each; model text is shown as written (no markup).

    ``receipts`` (``kernos -v``): also a line for each call the boundary repaired, and one for
    each progress notification of a long MCP call."""
    from rich.text import Text

    who = Text(event.agent if event.agent == "main" else f"{event.agent}/{event.session_id}", "dim")
    if event.kind == "normalized":
        if receipts:
            from kernos.boundary import describe_repairs

            line = describe_repairs(str(event.data["name"]), event.data["repairs"])
            err.print(Text.assemble(who, " ~ ", _clip(line, 400)))
    elif event.kind == "progress":
        if receipts:  # a long MCP call's progress notifications (kernos -v)
            from kernos.tasks import progress_text

            line = f"{event.data.get('name', '?')} {progress_text(event.data)}"
            err.print(Text.assemble(who, " … ", _clip(line, 400)))
    elif event.kind == "tool_call":
        args = event.data.get("args")
        shown = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)
        err.print(Text.assemble(who, " → ", str(event.data["name"]), " ", _clip(shown)))
    elif event.kind == "tool_result":
        result = event.data["result"]
        if result.is_error:  # a code when the result carries one (a budget stop carries none)
            mark = Text(f"✗ {result.code}" if result.code else "✗", "red")
        else:
            mark = Text("✓", "green")
        head = Text.assemble(who, " ", mark, " ")
        # the whole result, summarized to what is left of the line (never under 40 characters)
        err.print(Text.assemble(head, one_line(result.text, max(40, err.width - len(head)))))


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
                write_raw("\n")  # a new answer after an earlier one
            self.current.append(event.data["text"])
            self.any = True
            write_raw(event.data["text"])
        elif event.kind in ("tool_call", "text"):
            if self.current:
                self.last = "".join(self.current)  # one answer is complete
            self.current = []

    def finish(self, final: str) -> None:
        if self.current:
            self.last = "".join(self.current)
            self.current = []
        if self.any and self.last == final:
            write_raw("\n")
        elif final:
            if self.any:
                write_raw("\n")
            write_stdout(final)
        elif self.any:
            write_raw("\n")


def _say_interrupted(signum: int) -> None:
    import signal

    name = signal.Signals(signum).name
    err.print(f"{name} received: cancelling running tasks and stopping", markup=False)


#: the keys of the ``kernos run --json`` document, in this order (README "Scriptable output")
JSON_KEYS = (
    "answer", "session_id", "agent", "model", "usage", "cost", "children", "error", "exit_code",
)  # fmt: skip
#: the keys of each of its ``children`` (every task the run's session and its children spawned)
CHILD_KEYS = (
    "id", "parent_session", "child_session", "target_kind", "target", "name", "label", "model",
    "status", "error",
)  # fmt: skip


@dataclass
class _Report:
    """What ``kernos run --json`` prints, filled in as the run gets that far (a run that fails
    before it starts has no session yet)."""

    agent: str | None = None
    model: str | None = None
    session_id: str | None = None
    answer: str | None = None
    usage: UsageRecorder | None = None
    #: the configured prices (``[models.NAME] price``), which win over genai-prices'
    prices: dict[str, ModelPrice] = field(default_factory=dict)
    children: list[dict[str, Any]] = field(default_factory=list)

    def total(self) -> dict[str, Any]:
        """This run's requests, tokens and cost so far."""
        from kernos.runtime import reprice, total

        return total(reprice(self.usage.priced() if self.usage else (), self.prices))

    def document(self, error: str | None = None, exit_code: int = EXIT_OK) -> dict[str, Any]:
        summed = self.total()
        cost = summed.pop("cost")
        return {
            "answer": self.answer,
            "session_id": self.session_id,
            "agent": self.agent,
            "model": self.model,
            "usage": summed,
            "cost": cost,
            "children": self.children,
            "error": error,
            "exit_code": exit_code,
        }


def _spawned(runtime: Runtime, session_id: str, since: float) -> list[dict[str, Any]]:
    """Every task ``session_id`` spawned from ``since`` on, and their children in turn, as
    ``CHILD_KEYS`` records (the store's latest status), parents before their children."""
    from kernos.tasks import TaskStore

    tasks = TaskStore(runtime.store)
    found: list[dict[str, Any]] = []
    parents = [session_id]
    while parents:
        for row in tasks.children(parents.pop(0)):
            if row["created_at"] < since:
                continue  # a child of an earlier run of this session (--continue)
            found.append({key: row.get(key) for key in CHILD_KEYS})
            if row["child_session"]:
                parents.append(row["child_session"])
    return found


@dataclass(frozen=True)
class _Resumed:
    session_id: str
    agent: str
    history: list[Any]


def _resumed(
    runtime: Runtime, session_id: str | None, latest: bool, agent: str | None, quiet: bool
) -> _Resumed | None:
    """The session ``--session ID`` / ``--continue`` names, its history loaded; ``None`` for a
    new session. Raises the one-line exit 2 when there is none to continue."""
    if session_id is None and not latest:
        return None
    from kernos.runtime import get_session, latest_session, load_history

    with config_errors():
        store = runtime.store
        row = get_session(store, session_id) if session_id else latest_session(store)
        if row is None and session_id is not None:
            raise fail(
                f"there is no session {session_id} in this store ({runtime.home}); "
                "`kernos sessions` lists the ones you can continue"
            )
        if row is None:
            raise fail(
                f"there is no earlier session in this store ({runtime.home}) to continue; "
                "run without --continue to start one"
            )
        if agent is not None and agent != row["agent"]:
            raise fail(
                f"session {row['id']} is a conversation with agent {row['agent']}; drop "
                f"--agent {agent} to continue it, or start a new run without --continue/--session"
            )
        history = load_history(runtime.store, row["id"])
    if not quiet:
        now = time.time()
        err.print(
            f"continuing session {row['id']} ({row['turns']} turns, last active "
            f"{age(row['last_active'] or row['started_at'], now)})",
            markup=False,
        )
    return _Resumed(row["id"], row["agent"], history)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_command(
        prompt: Annotated[str, typer.Argument(help="What to ask the agent; '-' reads stdin.")],
        model: ModelOption = None,
        agent: Annotated[
            str | None,
            typer.Option("--agent", "-a", help="Agent to run (default main, or the session's)."),
        ] = None,
        config: ConfigOption = None,
        record: Annotated[
            Path | None, typer.Option("--record", help="Write the model's turns to a cassette.")
        ] = None,
        no_wait: Annotated[
            bool,
            typer.Option(
                "--no-wait",
                help="Exit at the first idle without waiting for children; stderr names each "
                "one left unfinished (stopped, or left to kernos worker processes).",
            ),
        ] = False,
        quiet: QuietOption = False,
        continue_last: ContinueOption = False,
        session_id: SessionOption = None,
        timeout: Annotated[
            str | None,
            typer.Option(
                "--timeout",
                help="Cap the whole run, e.g. 30m (default: the agent's timeout); when it is up "
                "the run and its children are cancelled and kernos exits 124.",
            ),
        ] = None,
        stream: Annotated[
            bool,
            typer.Option(
                "--stream/--no-stream",
                help="Write the answer to stdout as it arrives (--no-stream: once, at the end).",
            ),
        ] = True,
        as_json: Annotated[
            bool,
            typer.Option(
                "--json",
                help="Print one JSON document at the end instead of the answer (nothing streams "
                "to stdout): answer, session_id, agent, model, usage (requests, input_tokens, "
                "output_tokens, cached_tokens), cost (USD, null when unknown), children (id, "
                "parent_session, child_session, target_kind, target, name, label, model, status, "
                "error), error (null, or the error line; the exit code stays the same) and "
                "exit_code.",
            ),
        ] = False,
        approve: ApproveOption = None,
        yes: YesOption = False,
        compact: Annotated[
            bool,
            typer.Option(
                "--compact",
                help="With --continue or --session: compact the session's middle turns into "
                "one approved summary before PROMPT (the store keeps them).",
            ),
        ] = False,
    ) -> None:
        """Run an agent on PROMPT: the final answer goes to stdout, activity to stderr."""
        report = _Report()
        try:
            _run(
                report,
                prompt,
                model=model,
                agent=agent,
                config=config,
                record=record,
                no_wait=no_wait,
                quiet=quiet,
                continue_last=continue_last,
                session_id=session_id,
                timeout=timeout,
                stream=stream and not as_json,
                as_json=as_json,
                approve=approve or [],
                yes=yes,
                compact=compact,
            )
        except Failure as exc:
            if as_json:
                _dump(report.document(exc.message, exc.exit_code))
            raise
        if as_json:
            _dump(report.document())
        raise typer.Exit(EXIT_OK)


def _dump(document: dict[str, Any]) -> None:
    write_stdout(json.dumps(document, ensure_ascii=False, default=str))


def _run(
    report: _Report,
    prompt: str,
    *,
    model: str | None,
    agent: str | None,
    config: Path | None,
    record: Path | None,
    no_wait: bool,
    quiet: bool,
    continue_last: bool,
    session_id: str | None,
    timeout: str | None,
    stream: bool,
    as_json: bool,
    approve: list[str],
    yes: bool,
    compact: bool = False,
) -> None:
    """``kernos run`` up to its answer, filling ``report`` as it goes; a failure is raised as
    the :class:`Failure` whose line is already on stderr."""
    import asyncio

    from kernos._app import Interrupted, run_agent, run_until_signal
    from kernos.runtime import format_duration, new_session_id

    seconds = _timeout_seconds(timeout)
    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise fail("PROMPT is empty; pass what the agent should do")
    if continue_last and session_id is not None:
        raise fail("--continue and --session both pick a session; pass one of them")
    if compact and not (continue_last or session_id is not None):
        raise fail("--compact compacts a continued session; add --continue or --session ID")
    runtime = open_runtime(config, model, record, store=True)
    from kernos.cli._approve import run_approver

    runtime.approver = run_approver(approve, yes)
    try:
        resumed = _resumed(runtime, session_id, continue_last, agent, quiet)
    except typer.Exit:
        runtime.close()
        raise
    agent = agent or (resumed.agent if resumed else "main")
    report.agent = agent
    # known before the run starts, so a run stopped on the way still names its session
    run_id = resumed.session_id if resumed else new_session_id()
    from kernos.cli._usage_store import UsageRecorder

    with config_errors():
        usage = UsageRecorder(runtime.store)
    report.usage = usage
    report.prices = runtime.config.prices()

    streamed = AnswerStream()
    receipts = verbose()
    from kernos.cli._waiting import WaitStatus

    # a slow model request's status line (a terminal only; -q: none)
    waiting = WaitStatus(
        stderr_console(), text_shown=stream and sys.stdout.isatty(), enabled=not quiet
    )

    def on_event(event: SessionEvent) -> None:
        waiting(event)
        usage(event)
        if stream:
            streamed(event)
        if not quiet:
            activity(event, receipts=receipts)

    from kernos.runtime import span

    started = time.time()
    try:
        from kernos.tools import human_answers

        # on a terminal, the person answers what an MCP server asks during this session's calls
        with (
            config_errors(),
            span("kernos.run", agent=agent, model=model) as traced,
            human_answers(run_id),
        ):
            runtime.config.agent(agent)
            report.model = runtime.model_name(agent)
            runtime.model(report.model)
            traced.set(model=report.model)
            if timeout is None:
                seconds = runtime.config.agent_budget(agent).timeout
            report.session_id = run_id
            try:
                outcome = asyncio.run(
                    run_until_signal(
                        capped(
                            run_agent(
                                runtime,
                                prompt,
                                agent=agent,
                                wait=not no_wait,
                                on_event=on_event,
                                session_id=run_id,
                                history=resumed.history if resumed else (),
                                stream=stream,
                                compact=compact,
                            ),
                            seconds,
                        ),
                        on_signal=_say_interrupted,
                    )
                )
            finally:
                report.children = _spawned(runtime, run_id, started)
            traced.set(session_id=outcome.session_id, error=outcome.error)
    except Interrupted as exc:
        raise Failure(f"the run was {exc}", exc.exit_code) from None
    except RunTimedOut:
        if not quiet:
            from kernos.runtime import summary_line

            err.print(summary_line(report.total()), markup=False)
        shown = format_duration(seconds or 0)
        where = "--timeout" if timeout is not None else f"agent {agent}'s timeout"
        raise fail(
            f"the run reached its {where} of {shown} and was stopped; its running children "
            "were cancelled (raise the limit to let it finish)",
            EXIT_TIMEOUT,
        ) from None
    finally:
        waiting.close()
        runtime.close()
    report.answer = outcome.text
    if not quiet:  # the run went to its end (an error answer included): its total
        from kernos.runtime import summary_line

        err.print(summary_line(report.total()), markup=False)
    for child in outcome.left:  # --no-wait: where each unfinished child's result will be
        err.print(child.line("the run"), markup=False, highlight=False)
    if stream:
        streamed.finish(outcome.text)
    elif outcome.text and not as_json:
        write_stdout(outcome.text)
    if outcome.error:
        raise fail(f"the run failed: {outcome.error}", outcome.exit_code)
