"""``kernos chat``: an interactive session in the terminal (the library side is
:mod:`kernos._chat`; this module reads lines and renders)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernos.cli._common import (
    EXIT_OK,
    ApproveOption,
    ConfigOption,
    ContinueOption,
    ModelOption,
    QuietOption,
    SessionOption,
    YesOption,
    config_errors,
    err,
    fail,
    stderr_console,
)
from kernos.cli.run import AnswerStream, _resumed, activity

if TYPE_CHECKING:
    from kernos._chat import Chat
    from kernos.cli._usage_store import UsageRecorder
    from kernos.runtime import SessionEvent

#: the line history of ``kernos chat``, in the kernos home (private, like everything there)
HISTORY_FILE = "chat_history"
#: how many lines of it are kept
HISTORY_LENGTH = 1000
PROMPT = "> "


def _line_editing(home: Path) -> Path | None:
    """Turn on readline's line editing and load the history (a terminal only); the file to save
    the history to, or ``None``."""
    if not sys.stdin.isatty():
        return None
    try:
        import readline
    except ImportError:  # a Python built without it: plain lines
        return None
    path = home / HISTORY_FILE
    with contextlib.suppress(OSError):
        readline.read_history_file(path)
    readline.set_history_length(HISTORY_LENGTH)
    return path


def _save_history(path: Path | None) -> None:
    if path is None:
        return
    import readline

    with contextlib.suppress(OSError):
        readline.write_history_file(path)  # GNU readline writes a new file, 0600
        os.chmod(path, 0o600)  # and so does kernos where the readline is another


def _read(prompt: str) -> str | None:
    """One line; ``None`` at end of input (Ctrl-D). Ctrl-C drops the line and asks again."""
    while True:
        try:
            return input(prompt)
        except EOFError:
            return None
        except KeyboardInterrupt:
            sys.stdout.write("\n")  # the line typed so far is dropped, as in a shell
            sys.stdout.flush()


def _show_tasks(chat: Chat) -> None:
    rows = chat.children()
    if not rows:
        err.print("no child tasks in this session yet", markup=False)
        return
    for row in rows:
        label = row.get("name") or row.get("label") or ""
        sys.stdout.write(f"{row['id']}  {row['status']:<10} {label}\n")
    sys.stdout.flush()


def _show_usage(usage: UsageRecorder) -> None:
    from kernos.runtime import summary_line, total

    sys.stdout.write(f"this chat: {summary_line(total(usage.priced()))}\n")
    sys.stdout.flush()


def _show_help() -> None:
    from kernos._chat import COMMANDS

    for name, what in COMMANDS.items():
        sys.stdout.write(f"{name:<8} {what}\n")
    sys.stdout.write("Ctrl-C cancels the running turn (the session goes on); Ctrl-D leaves.\n")
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    @app.command("chat")
    def chat_command(
        model: ModelOption = None,
        agent: Annotated[
            str | None,
            typer.Option(
                "--agent",
                "-a",
                help="Agent to talk to (default main, or the session's).",
            ),
        ] = None,
        config: ConfigOption = None,
        continue_last: ContinueOption = False,
        session_id: SessionOption = None,
        quiet: QuietOption = False,
        approve: ApproveOption = None,
        yes: YesOption = False,
    ) -> None:
        """Talk with an agent in the terminal: one session across turns, answers streamed.

        Type /help for the commands; Ctrl-C cancels the running turn, Ctrl-D leaves.

        The session and its store are kernos run's: `kernos run --continue` picks it up.
        """
        from kernos._chat import Chat, parse_line
        from kernos.cli._common import open_runtime
        from kernos.cli._usage_store import UsageRecorder
        from kernos.tools import human_answers

        if continue_last and session_id is not None:
            raise fail("--continue and --session both pick a session; pass one of them")
        runtime = open_runtime(config, model, store=True)
        from kernos.cli._approve import run_approver

        runtime.approver = run_approver(approve or [], yes)  # asked on this terminal, as run does
        try:
            resumed = _resumed(runtime, session_id, continue_last, agent, quiet)
            agent = agent or (resumed.agent if resumed else "main")
            with config_errors():
                usage = UsageRecorder(runtime.store)
                runtime.config.agent(agent)
                runtime.model(runtime.model_name(agent))
            streams = [AnswerStream()]
            from kernos.cli._waiting import WaitStatus

            # a slow model request's status line (a terminal only; -q: none)
            waiting = WaitStatus(
                stderr_console(), text_shown=sys.stdout.isatty(), enabled=not quiet
            )
            waiting.active = False

            def on_event(event: SessionEvent) -> None:
                waiting(event)
                usage(event)
                streams[-1](event)
                if not quiet:
                    activity(event)

            history = _line_editing(runtime.home)
            with (
                config_errors(),
                Chat(
                    runtime,
                    agent,
                    on_event=on_event,
                    session_id=resumed.session_id if resumed else None,
                    history=resumed.history if resumed else (),
                ) as chat,
                # on a terminal, the person answers what an MCP server asks during their turns
                human_answers(chat.session.session_id),
            ):
                if not quiet:
                    err.print(
                        f"chat with agent {agent} in session {chat.session.session_id}; "
                        "/help lists the commands, Ctrl-D leaves",
                        markup=False,
                        highlight=False,
                    )
                prompt = PROMPT if sys.stdin.isatty() else ""
                try:
                    while (typed := _read(prompt)) is not None:
                        line = parse_line(typed)
                        if line.kind == "empty":
                            continue
                        if line.kind == "unknown":
                            err.print(
                                f"{line.text} is not a command; /help lists them (start a "
                                "line with // to send one that begins with /)",
                                markup=False,
                                highlight=False,
                            )
                            continue
                        if line.kind == "command":
                            if line.text == "/exit":
                                break
                            if line.text == "/tasks":
                                _show_tasks(chat)
                            elif line.text == "/usage":
                                _show_usage(usage)
                            else:
                                _show_help()
                            continue
                        streams[:] = [AnswerStream()]
                        waiting.active = True
                        outcome = chat.turn(line.text)
                        waiting.active = False  # the prompt has the line until the next turn
                        waiting.clear()
                        if outcome.cancelled:
                            if streams[-1].any:
                                sys.stdout.write("\n")
                                sys.stdout.flush()
                            err.print(
                                "turn cancelled; the session goes on (Ctrl-D leaves)",
                                markup=False,
                            )
                        elif outcome.error:
                            streams[-1].finish("")
                            err.print(f"error: {outcome.error}", markup=False, highlight=False)
                        else:
                            streams[-1].finish(outcome.text)
                finally:
                    waiting.close()
                    _save_history(history)
            for child in chat.left:  # as `kernos run --no-wait` says it
                err.print(child.line("the chat"), markup=False, highlight=False)
            if not quiet:
                from kernos.runtime import summary_line, total

                err.print(summary_line(total(usage.priced())), markup=False)
        finally:
            runtime.close()
        raise typer.Exit(EXIT_OK)
