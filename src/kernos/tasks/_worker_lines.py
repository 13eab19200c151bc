"""What ``kernos worker`` says on stderr per child it executes (pure): one line when it takes a
child, one when the child's run there ends.

::

    worker h:42 took t_1a2b3c4d (survey) on openai-chat:qwen3
    worker h:42 ended t_1a2b3c4d (survey) on openai-chat:qwen3: completed in 12.3s
"""

from __future__ import annotations

from kernos.runtime import format_duration


def took_line(executor: str, task_id: str, label: str, model: str) -> str:
    return f"worker {executor} took {task_id} ({label}) on {model}"


def ended_line(
    executor: str, task_id: str, label: str, model: str, status: str, seconds: float, left: bool
) -> str:
    """``left``: the worker stopped and left the run to the crash rule (it did not end)."""
    shown = format_duration(round(max(seconds, 0.0), 1))
    what = f"left {status}" if left else status
    return f"worker {executor} ended {task_id} ({label}) on {model}: {what} after {shown}"
