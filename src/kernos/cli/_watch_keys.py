"""What a key does in ``kernos tasks watch``: the bytes a terminal sends read as key presses, and
the view's state moved by them (the selection, the transcript toggle, the reason typed for a
denial, the status line). What reaches the store (a cancel, an answer) is returned, not done: the
screen (``cli/_watch_screen.py``) does it. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernos.tasks import TreeRow

#: what ``d`` shows while its reason is typed
REASON_PROMPT = "deny: reason (enter to send, escape to go back): "

_ARROWS = {"\x1b[A": "up", "\x1bOA": "up", "\x1b[B": "down", "\x1bOB": "down"}


def parse_keys(data: str) -> list[str]:
    """Key presses in what the terminal sent: ``up``/``down`` for arrows, else the character.
    Other escape sequences are skipped."""
    keys: list[str] = []
    index = 0
    while index < len(data):
        if data[index] == "\x1b":
            sequence = data[index : index + 3]
            if sequence in _ARROWS:
                keys.append(_ARROWS[sequence])
                index += 3
                continue
            index += 1  # skip the rest of an unknown CSI sequence
            if index == len(data):  # a lone escape key
                keys.append("escape")
                continue
            if data[index : index + 1] in ("[", "O"):
                index += 1
                while index < len(data) and not ("@" <= data[index] <= "~"):
                    index += 1
                index += 1
            continue
        keys.append(data[index])  # k / j move only outside a reason being typed (Keys.press)
        index += 1
    return keys


@dataclass(frozen=True)
class Quit:
    """Leave the view (``q``)."""


@dataclass(frozen=True)
class Cancel:
    """Cancel the task, as ``kernos tasks cancel`` does."""

    task_id: str


@dataclass(frozen=True)
class Answer:
    """Approve or deny the task's open approval request, as ``kernos approve`` / ``deny`` do."""

    task_id: str
    approved: bool
    reason: str | None = None


Action = Quit | Cancel | Answer


class Keys:
    """The view's state as the keys move it."""

    def __init__(self) -> None:
        self.rows: list[TreeRow] = []
        self.selected: str | None = None
        self.tail_open = False
        #: the transcript sequence the tail was read at (``-1``: read it again)
        self.tail_seq = -1
        self.message = ""
        #: the reason being typed for a ``d`` (``None``: not typing one)
        self.reason: str | None = None

    def tasks(self) -> list[str]:
        return [r.id for r in self.rows if r.kind == "task"]

    def keep_selection(self) -> None:
        """After the rows changed: the selected task if still shown, else the first task."""
        tasks = self.tasks()
        if self.selected not in tasks:
            self.selected = tasks[0] if tasks else None

    def _move(self, step: int) -> None:
        tasks = self.tasks()
        if not tasks:
            return
        index = tasks.index(self.selected) if self.selected in tasks else 0
        self.selected = tasks[max(0, min(len(tasks) - 1, index + step))]
        self.tail_seq = -1

    def press(self, key: str) -> Action | None:
        """Act on one key; what the store must do, if anything."""
        if self.reason is not None:
            return self._type_reason(key)
        key = {"k": "up", "j": "down"}.get(key, key)
        if key in ("q", "Q"):
            return Quit()
        if key == "up":
            self._move(-1)
        elif key == "down":
            self._move(1)
        elif key in ("t", "T"):
            self.tail_open = not self.tail_open
            self.tail_seq = -1
        elif key in ("c", "C", "a", "A", "d", "D"):
            return self._act(key.lower())
        return None

    def _act(self, key: str) -> Action | None:
        """``c``, ``a`` or ``d`` on the selected task."""
        if self.selected is None:
            self.message = "no task selected"
        elif key == "c":
            return Cancel(self.selected)
        elif key == "a":  # a waiting task's approval request
            return Answer(self.selected, True)
        else:  # a denial carries an optional reason the model reads
            self.reason = ""
            self.message = REASON_PROMPT
        return None

    def _type_reason(self, key: str) -> Action | None:
        """One key of the reason a ``d`` asks for: enter denies, escape goes back."""
        assert self.reason is not None
        if key in ("\r", "\n"):
            reason, self.reason = self.reason.strip(), None
            if self.selected is None:
                self.message = "no task selected"
                return None
            return Answer(self.selected, False, reason or None)
        if key == "escape":
            self.reason, self.message = None, "not denied"
            return None
        if key in ("\x7f", "\b"):
            self.reason = self.reason[:-1]
        elif len(key) == 1 and key.isprintable():
            self.reason += key
        self.message = REASON_PROMPT + self.reason
        return None
