"""The full-screen ``kernos tasks watch`` on a terminal (rich ``Live``, plain ANSI, so it works over
SSH): rows, selection, transcript tail, status line. The keys' rules are in ``_watch_keys.py``;
this module reads the terminal, draws, and does what a key asks of the store."""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from kernos.cli._watch_keys import Answer, Cancel, Keys, Quit, parse_keys
from kernos.cli._watch_view import HEADER, POLL_SECONDS, STATUS_STYLE, TAIL_LINES, cells
from kernos.tasks import ACTIVE

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from kernos.tasks import TreeRow


class Rows(Protocol):
    """What the screen reads and asks of the store (``cli/_watch.py``'s ``Source``)."""

    def poll(self, now: float) -> bool: ...
    def rows(self, now: float) -> list[TreeRow]: ...
    def last_seq(self, task_id: str) -> int: ...
    def tail(self, task_id: str, lines: int) -> list[str]: ...
    def cancel(self, task_id: str) -> str: ...
    def answer(self, task_id: str, approved: bool, reason: str | None = None) -> str: ...


@contextlib.contextmanager
def _keys_unbuffered(fd: int | None) -> Iterator[None]:
    """Keys arrive one by one, unechoed (cbreak: Ctrl-C still interrupts); restored on exit."""
    if fd is None:
        yield
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class Screen(Keys):
    """The full-screen view over a source of rows."""

    def __init__(self, source: Rows) -> None:
        super().__init__()
        self.source = source
        self.tail: list[str] = []

    def key(self, key: str) -> bool:
        """Act on one key; ``False`` to leave."""
        action = self.press(key)
        if isinstance(action, Quit):
            return False
        if isinstance(action, Cancel):
            self.message = self.source.cancel(action.task_id)
        elif isinstance(action, Answer):
            self.message = self.source.answer(action.task_id, action.approved, action.reason)
        return True

    def refresh_tail(self) -> None:
        if not self.tail_open or self.selected is None:
            return
        seq = self.source.last_seq(self.selected)
        if seq != self.tail_seq:
            self.tail_seq = seq
            self.tail = self.source.tail(self.selected, TAIL_LINES)

    # -- drawing -------------------------------------------------------------------------------
    def render(self, console: Console, now: float) -> RenderableType:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        height = console.size.height
        tail_height = TAIL_LINES + 1 if self.tail_open else 0
        room = max(1, height - 4 - tail_height)
        visible = self._window(room)
        running = sum(1 for r in self.rows if r.kind == "task" and r.status in ACTIVE)
        tasks = sum(1 for r in self.rows if r.kind == "task")
        title = Text.assemble(
            ("kernos tasks", "bold"), f" — {tasks} tasks, {running} active", style=""
        )
        grid = Table(box=None, pad_edge=False, show_edge=False, expand=True, header_style="bold")
        for name in HEADER:
            grid.add_column(
                name,
                no_wrap=True,
                overflow="ellipsis",
                ratio=1 if name == "LABEL" else None,
                justify="right" if name in ("ELAPSED", "IN", "OUT", "COST") else "left",
            )
        for row in visible:
            texts = [Text(cell) for cell in cells(row)]
            texts[1].stylize(STATUS_STYLE.get(row.status, ""))
            style = "reverse" if row.id == self.selected else ("bold" if row.depth == 0 else "")
            grid.add_row(*texts, style=style)
        if not self.rows:
            grid.add_row(Text("(no tasks yet)", "dim"))
        parts: list[RenderableType] = [title, grid]
        if self.tail_open:
            parts.append(Text(f"── transcript of {self.selected or '-'} (last lines)", "dim"))
            lines = self.tail[-TAIL_LINES:] if self.selected else []
            parts.extend(Text(line, no_wrap=True, overflow="ellipsis") for line in lines)
        parts.append(Text(self.message, "bold") if self.message else Text(""))
        keys = "↑/↓ select · t transcript · c cancel · a/d approve/deny · q quit"
        parts.append(Text(keys, "dim"))
        return Group(*parts)

    def _window(self, room: int) -> list[TreeRow]:
        """The rows that fit, scrolled so the selected one shows."""
        if len(self.rows) <= room:
            return self.rows
        at = next((i for i, r in enumerate(self.rows) if r.id == self.selected), 0)
        start = max(0, min(at - room // 2, len(self.rows) - room))
        return self.rows[start : start + room]

    # -- the loop ------------------------------------------------------------------------------
    def run(self, signalled: list[int]) -> int:
        """Until ``q`` (0) or a signal (its exit code)."""
        from rich.console import Console
        from rich.live import Live

        console = Console(highlight=False, markup=False)
        fd = sys.stdin.fileno() if sys.stdin.isatty() else None
        with (
            _keys_unbuffered(fd),
            Live(
                console=console,
                screen=True,
                auto_refresh=False,
                redirect_stdout=False,
                redirect_stderr=False,
            ) as live,
        ):
            drawn = 0.0
            polled = 0.0
            while not signalled:
                now = time.time()
                changed = False
                if now - polled >= POLL_SECONDS:
                    polled = now
                    if self.source.poll(now):
                        self.rows = self.source.rows(now)
                        self.keep_selection()
                        changed = True
                    self.refresh_tail()
                if changed or now - drawn >= 1.0:
                    self.rows = self.source.rows(now)  # elapsed times move on
                    live.update(self.render(console, now), refresh=True)
                    drawn = now
                keys = self._read_keys(fd, POLL_SECONDS / 2)
                if keys is None:  # the terminal went away
                    return 0
                for key in keys:
                    if not self.key(key):
                        return 0
                    self.refresh_tail()
                    live.update(self.render(console, time.time()), refresh=True)
            return signalled[0]

    @staticmethod
    def _read_keys(fd: int | None, timeout: float) -> list[str] | None:
        """The keys pressed within ``timeout``; ``None`` when the terminal went away."""
        if fd is None:
            time.sleep(timeout)
            return []
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return []
        data = os.read(fd, 64)
        if not data:
            return None
        return parse_keys(data.decode("utf-8", errors="replace"))
