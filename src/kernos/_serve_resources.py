"""The pure rules of the resources ``kernos mcp`` serves: each task a connection's session
started is ``kernos://tasks/{id}``, a text resource whose text is the task's status and its
transcript (as ``kernos tasks show`` and ``kernos tasks output`` render them).

The I/O (which session asks, the store, the update notifications) is in :mod:`kernos._serve`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

#: the URI template of a task resource (RFC 6570 level 1)
TASK_TEMPLATE = "kernos://tasks/{id}"
TASK_PREFIX = "kernos://tasks/"
TASK_MIME = "text/plain"
_TASK_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def task_uri(task_id: str) -> str:
    """The resource URI of task ``task_id``."""
    return TASK_PREFIX + task_id


def task_id_of(uri: str) -> str | None:
    """The task id a ``kernos://tasks/{id}`` URI names (``None``: not such a URI)."""
    if not uri.startswith(TASK_PREFIX):
        return None
    rest = uri[len(TASK_PREFIX) :]
    return rest if _TASK_ID.fullmatch(rest) else None


def task_title(row: dict[str, Any]) -> str:
    """What a host lists for a task: its label (or name), id and status."""
    label = row.get("name") or row.get("label") or row["id"]
    return f"{label} ({row['id']}, {row['status']})"


def task_text(row: dict[str, Any], events: Sequence[dict[str, Any]]) -> str:
    """A task resource's text: the status block ``kernos tasks show`` prints, then
    ``transcript:`` and every line ``kernos tasks output`` prints."""
    from kernos.tasks import render_event, render_output

    lines = [line for e in events for line in render_event(e["type"], e["payload"]).splitlines()]
    return "\n".join([render_output(row, [], "status", 0), "transcript:", *lines])


def unknown_task_message(uri: str) -> str:
    """The error a read or subscribe of a URI that names no task of this connection gets."""
    return (
        f"{uri} is not a task of this connection: list the resources (resources/list) and read "
        f"one of them; task URIs look like {TASK_TEMPLATE}"
    )
