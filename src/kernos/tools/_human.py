"""A person who can answer an MCP server's elicitation: the one at the terminal of ``kernos run``
or ``kernos chat`` (stdin and stderr both TTYs), asked on stderr, answering on stdin.

Only the session that person talks to is theirs: :func:`human_answers` names it, and an
elicitation that arrives while another session's call runs (a child task, a worker's, or any
call when no terminal is there) is answered ``cancel`` by :mod:`kernos.tools._mcp`: nobody was
asked, which is not the user saying no.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from kernos.tools._elicit import NO, YES, NoAnswer, form_fields, parse_answer

#: times a field is asked again after an answer it cannot take
_RETRIES = 3


class Human:
    """The person at this terminal, answering for the session ``session_id``."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._one_at_a_time = asyncio.Lock()

    async def answer(self, server: str, params: Any) -> dict[str, Any]:
        """Ask the elicitation ``params`` of MCP server ``server``; the result's fields
        (``action`` and, for an accepted form, ``content``). End of input: ``cancel``."""
        async with self._one_at_a_time:
            return await asyncio.to_thread(self._ask, server, params)

    # -- on a thread: blocking reads of stdin ------------------------------------------------
    def _ask(self, server: str, params: Any) -> dict[str, Any]:
        try:
            if getattr(params, "mode", "form") == "url":
                _say(f"MCP server [{server}] asks you to open a URL: {params.message}")
                _say(f"  {params.url}")
                return {"action": "accept" if self._yes("Open it and go on? [Y/n] ") else "decline"}
            _say(f"MCP server [{server}] asks: {params.message}")
            if not self._yes("Answer it? [Y/n] "):
                return {"action": "decline"}
            content: dict[str, Any] = {}
            for field in form_fields(params.requested_schema):
                for _attempt in range(_RETRIES + 1):
                    try:
                        content[field.name] = parse_answer(field, _read(field.question()))
                        break
                    except NoAnswer:
                        if not field.required:
                            break
                        _say(f"  {field.name} is required; type a value")
                    except ValueError as exc:
                        _say(f"  {exc}")
                else:
                    return {"action": "decline"}
            return {"action": "accept", "content": content}
        except EOFError:
            return {"action": "cancel"}

    def _yes(self, question: str) -> bool:
        while True:
            typed = _read(question).strip().lower()
            if typed in ("", *YES):
                return True
            if typed in NO:
                return False
            _say("  answer y or n")


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _read(question: str) -> str:
    sys.stderr.write(question)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


_lock = threading.Lock()
_human: Human | None = None


def on_a_terminal() -> bool:
    """Whether a person is there to answer: stdin and stderr are both TTYs."""
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def the_human() -> Human | None:
    """The person who answers elicitations in this process, if any."""
    return _human


@contextlib.contextmanager
def human_answers(session_id: str) -> Iterator[Human | None]:
    """While inside: the person at this terminal answers the elicitations of calls that session
    ``session_id`` makes; without a terminal nothing changes (every elicitation is ``cancel``)."""
    global _human
    if not on_a_terminal():
        yield None
        return
    with _lock:
        before, _human = _human, Human(session_id)
        mine = _human
    try:
        yield mine
    finally:
        with _lock:
            _human = before
