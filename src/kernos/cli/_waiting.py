"""The status line of a slow model request: while one runs longer than :data:`SHOW_AFTER` seconds
and stderr is a terminal, one line there says which session waits, for how long, and how many
tokens it has streamed so far; it is erased when the answer comes. Never on a non-terminal.

:class:`Waits` is the rule (plain data, the clock passed in); :class:`WaitStatus` draws it with
rich's :class:`~rich.live.Live` on stderr.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

    from kernos.runtime import SessionEvent

#: a request is shown once it has waited this long, in seconds
SHOW_AFTER = 2.0
#: how often the line is redrawn (its seconds count up), in seconds
TICK = 0.25
#: the events that mean a session's request was answered (a new ``request`` restarts the wait)
_ANSWERED = frozenset({"tool_call", "text", "usage", "idle"})


@dataclass
class _Wait:
    who: str
    model: str
    since: float
    tokens: int = 0


class Waits:
    """The model requests in flight, per session, from session events.

    Args:
        text_shown: streamed text goes to the same terminal (stdout is one): the first piece
            of an answer ends its wait, the text itself shows progress from then on.
    """

    def __init__(self, *, text_shown: bool = False) -> None:
        self.text_shown = text_shown
        self._waits: dict[str, _Wait] = {}
        self._lock = threading.Lock()

    def see(self, event: SessionEvent, now: float) -> None:
        with self._lock:
            sid = event.session_id
            if event.kind == "request":
                who = event.agent if event.agent == "main" else f"{event.agent}/{sid}"
                self._waits[sid] = _Wait(who, str(event.data.get("model") or "the model"), now)
            elif event.kind == "delta" and sid in self._waits:
                if self.text_shown and not event.data.get("background"):
                    del self._waits[sid]
                else:
                    self._waits[sid].tokens += 1  # one streamed piece is about one token
            elif event.kind in _ANSWERED:
                self._waits.pop(sid, None)

    def clear(self) -> None:
        with self._lock:
            self._waits.clear()

    def line(self, now: float) -> str | None:
        """The status line at ``now``: every request waiting :data:`SHOW_AFTER` seconds or
        more, the longest first; ``None`` when there is none."""
        with self._lock:
            slow = sorted(
                (w for w in self._waits.values() if now - w.since >= SHOW_AFTER),
                key=lambda w: w.since,
            )
            if not slow:
                return None
            return " · ".join(
                f"{w.who} waiting for {w.model}: {int(now - w.since)}s, "
                f"{w.tokens} token{'' if w.tokens == 1 else 's'} streamed"
                for w in slow
            )


class WaitStatus:
    """Draws :class:`Waits` on ``console`` (stderr) while a run or chat goes on; a no-op when
    the console is not a terminal. A session-event callback; :meth:`close` erases the line."""

    def __init__(self, console: Console, *, text_shown: bool, enabled: bool = True) -> None:
        self.console = console
        self.waits = Waits(text_shown=text_shown)
        self.enabled = enabled and console.is_terminal
        #: drawn only while true (``kernos chat`` between turns: the prompt has the line)
        self.active = True
        self._live: Live | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None
        if self.enabled:
            self._ticker = threading.Thread(target=self._tick, name="kernos-waiting", daemon=True)
            self._ticker.start()

    def __call__(self, event: SessionEvent) -> None:
        if not self.enabled:
            return
        self.waits.see(event, time.monotonic())
        if event.kind == "delta" and self.waits.line(time.monotonic()) is None:
            self._draw(None)  # gone before the text that follows is written

    def clear(self) -> None:
        """Forget every wait and erase the line (a turn that ended or was cancelled)."""
        self.waits.clear()
        self._draw(None)

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        self.clear()

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            self._draw(self.waits.line(time.monotonic()) if self.active else None)

    def _draw(self, line: str | None) -> None:
        from rich.live import Live
        from rich.text import Text

        with self._lock:
            if line is None:
                if self._live is not None:
                    self._live.stop()  # transient: the line is erased
                    self._live = None
                return
            shown = Text(line, "dim", no_wrap=True, overflow="ellipsis")
            if self._live is None:
                self._live = Live(
                    shown,
                    console=self.console,
                    transient=True,
                    auto_refresh=False,
                    redirect_stdout=False,
                    redirect_stderr=False,
                )
                self._live.start()
            self._live.update(shown, refresh=True)
