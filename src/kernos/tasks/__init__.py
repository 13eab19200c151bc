"""Sub-agent tasks: the ``task`` tool and its companions ``task_send``, ``task_output``,
``task_cancel`` (docs/architecture.md, "The task lifecycle").

Pure rules (:func:`normalize_task_arguments`, :func:`resolve_spawn_items`,
:func:`resolve_run_in_background`, :func:`clamp_task_summary`) are separate from the
:class:`TaskManager`, which runs children as sessions and keeps their records in the store.
"""

import typing

from kernos import _lazy

if typing.TYPE_CHECKING:
    from kernos.tasks._children import TASK_TOOL_NAMES
    from kernos.tasks._dbos import DBOSEngine, queue_name
    from kernos.tasks._engine import crash_mode
    from kernos.tasks._manager import TaskManager, TaskToolset
    from kernos.tasks._normalize import (
        PADDING_PROMPTS,
        clamp_task_summary,
        normalize_task_arguments,
    )
    from kernos.tasks._prompts import PROMPT_FILES, build_task_description, prompt_text
    from kernos.tasks._record import TaskRecord
    from kernos.tasks._resolve import (
        MAX_BATCH,
        SpawnItem,
        SpawnResolution,
        TaskArgs,
        resolve_run_in_background,
        resolve_spawn_items,
    )
    from kernos.tasks._scheduler import TaskScheduler
    from kernos.tasks._state import ACTIVE, TRANSITIONS, Residency, TaskStatus, can_move
    from kernos.tasks._store import (
        MIGRATIONS,
        TaskStore,
        child_session_row,
        progress_payload,
        progress_text,
        render_event,
    )
    from kernos.tasks._team_rules import group_members
    from kernos.tasks._team_store import TeamStore
    from kernos.tasks._teams import LEAD_TOOLS
    from kernos.tasks._tools import FOREGROUND_WAIT, render_output
    from kernos.tasks._tree import SessionUsage, TreeRow, task_tree, tree_signature
    from kernos.tasks._worker_lines import ended_line, took_line

__all__ = [
    "ACTIVE",
    "FOREGROUND_WAIT",
    "LEAD_TOOLS",
    "MAX_BATCH",
    "MIGRATIONS",
    "PADDING_PROMPTS",
    "PROMPT_FILES",
    "TASK_TOOL_NAMES",
    "TRANSITIONS",
    "DBOSEngine",
    "Residency",
    "SessionUsage",
    "SpawnItem",
    "SpawnResolution",
    "TaskArgs",
    "TaskManager",
    "TaskRecord",
    "TaskScheduler",
    "TaskStatus",
    "TaskStore",
    "TaskToolset",
    "TeamStore",
    "TreeRow",
    "build_task_description",
    "can_move",
    "child_session_row",
    "clamp_task_summary",
    "crash_mode",
    "ended_line",
    "group_members",
    "normalize_task_arguments",
    "progress_payload",
    "progress_text",
    "prompt_text",
    "queue_name",
    "render_event",
    "render_output",
    "resolve_run_in_background",
    "resolve_spawn_items",
    "task_tree",
    "took_line",
    "tree_signature",
]


if not typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy.exports(__name__)
