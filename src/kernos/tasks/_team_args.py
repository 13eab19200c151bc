"""Who calls a team tool and with what: the caller's :class:`Seat`, each team tool's parameters,
and their padding rule (:func:`prepare_team_args`), apart from the teams that run them
(:mod:`kernos.tasks._teams`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from kernos.boundary import identifier, non_blank_text


@dataclass(frozen=True, slots=True)
class Seat:
    """Who calls a team tool: the lead (``name == "lead"``) or a member, in one team."""

    lead: str
    team: str
    name: str


# -- parameters ----------------------------------------------------------------------------------


class _Args(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TeamSendArgs(_Args):
    to: str
    message: str
    team: str | None = None


class TeamStatusArgs(_Args):
    team: str | None = None


class TeamWaitArgs(_Args):
    team: str | None = None
    until: Literal["idle", "mail"] = "idle"
    timeout: float = 300


class BoardAddArgs(_Args):
    title: str
    detail: str | None = None
    team: str | None = None


class BoardListArgs(_Args):
    status: Literal["open", "claimed", "done", "dropped"] | None = None
    team: str | None = None


class BoardUpdateArgs(_Args):
    id: int
    status: Literal["open", "claimed", "done", "dropped"] | None = None
    note: str | None = None
    owner: str | None = None
    team: str | None = None


def prepare_team_args(raw: Any) -> dict[str, Any]:
    """Padding to absence: blank strings, ``null`` words; ``message``/``note``/``detail``/
    ``title`` kept verbatim when not blank."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        cleaned: Any
        if key in ("message", "note", "detail", "title"):
            cleaned = non_blank_text(value)
        elif key in ("id", "timeout"):
            cleaned = value if isinstance(value, int | float) or non_blank_text(value) else None
        elif key == "to":
            cleaned = value.strip() if isinstance(value, str) and value.strip() else None
        else:
            cleaned = identifier(value)
        if cleaned is not None:
            out[key] = cleaned
    return out
