"""The one error root, and the configuration family every layer above raises.

::

    KernosError                       catch kernos, and nothing else
    ├── ConfigError                   a developer/configuration mistake: exit 2 with the fix
    │   └── NoModelError, StoreError, McpServerError, ...
    ├── BudgetExceeded                a session used up a limit (max_turns, max_tokens)
    └── EmptyAnswers                  the model answered with nothing, ``empty_retries`` + 1 times

A model request's own failures are pydantic-ai's ``ModelAPIError`` family on both engines;
:func:`kernos.runtime.model_failure` turns them (and :class:`EmptyAnswers`) into one line.

Light on purpose (no pydantic): the store and the light commands import it without building the
config models.
"""

from __future__ import annotations

from pathlib import Path


class KernosError(Exception):
    """The root of kernos's own errors."""


class ConfigError(KernosError):
    """The configuration is wrong: ``file``, ``key`` and ``fix`` say where and what to do.

    ``others`` holds further problems found in the same pass (``kernos config check`` lists them
    all; other commands show the first).
    """

    def __init__(self, file: str | Path | None, key: str, problem: str, fix: str) -> None:
        self.file = str(file) if file is not None else "(config)"
        self.key = key
        self.problem = problem
        self.fix = fix
        self.others: list[ConfigError] = []
        super().__init__(f"{self.file}: {key}: {problem}; {fix}")


class EmptyAnswers(KernosError):
    """The model answered with no text and no tool call ``count`` times in a row."""

    def __init__(self, model: str, count: int) -> None:
        self.model = model
        self.count = count
        super().__init__(f"the model returned no text and no tool call {count} times in a row")
