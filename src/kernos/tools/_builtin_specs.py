"""The built-in file tools (:mod:`kernos.tools._builtin`) as :class:`~kernos.boundary.ToolSpec`:
each tool's semantic checks, its run in a thread (:func:`_in_thread`) and
:func:`builtin_tools`, which builds them for a workspace."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from kernos.boundary import (
    ToolContext,
    ToolError,
    ToolSpec,
)
from kernos.tools._builtin import (
    BUILTIN_PREPARE,
    ListFilesArgs,
    ReadFileArgs,
    SearchFilesArgs,
    _matcher,
    _no_nul,
    _regex,
    list_files,
    read_file,
    read_text,
    search_files,
)
from kernos.tools._paths import PathRefused, WorkspacePaths


def _check_read(args: ReadFileArgs) -> None:
    _no_nul(args.path, "path", "invalid_path")


def _check_list(args: ListFilesArgs) -> None:
    _no_nul(args.path, "path", "invalid_path")
    _matcher(args.pattern, "pattern", names_anywhere=False)


def _check_search(args: SearchFilesArgs) -> None:
    _no_nul(args.path, "path", "invalid_path")
    if args.glob is not None:
        _matcher(args.glob, "glob", names_anywhere=True)
    _regex(args.pattern, args.ignore_case)


#: the semantic stage of each tool: the model's text checked before anything runs
_CHECKS: dict[str, Callable[[Any], None]] = {
    "read_file": _check_read,
    "list_files": _check_list,
    "search_files": _check_search,
}

_Run = Callable[[WorkspacePaths, Any, threading.Event], str]


async def _in_thread(name: str, run: _Run, ws: WorkspacePaths, args: Any) -> str:
    """``run`` in a daemon thread of its own, awaited without blocking the event loop.

    Not ``asyncio.to_thread``: its executor's threads are joined when the loop closes and when the
    interpreter exits, so a run that is cancelled (``--timeout``, SIGTERM, a client gone) would
    still hold the process until the file work ended. Here cancelling sets ``stop``, which the
    work checks between files and entries, and nothing waits for the thread."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()
    stop = threading.Event()
    context = contextvars.copy_context()

    def settle(outcome: Callable[[], None]) -> None:
        if not done.done():
            outcome()

    def work() -> None:
        answer: Callable[[], None]
        try:
            answer = functools.partial(done.set_result, context.run(run, ws, args, stop))
        except BaseException as exc:
            answer = functools.partial(done.set_exception, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(settle, answer)

    threading.Thread(target=work, name=f"kernos-{name}", daemon=True).start()
    try:
        return await done
    finally:
        stop.set()


def workspace_spec(
    name: str,
    params: type[BaseModel],
    run: _Run,
    ws: WorkspacePaths,
    *,
    prepare: Callable[[Any], dict[str, Any]],
    check: Callable[[Any], None],
    failure: tuple[str, str],
    permission: str | None = None,
    preview: Callable[[Any, ToolContext], str | None] | None = None,
) -> ToolSpec[Any]:
    """A workspace tool: described by ``<name>.md``, refused when ``check`` raises a
    :class:`ToolError`, run in a thread of its own (:func:`_in_thread`); an ``OSError`` becomes
    the ``ToolError`` ``failure`` names (its code, what the tool could not do)."""

    def validate(args: Any) -> ToolError | None:
        try:
            check(args)
        except ToolError as refusal:
            return refusal
        return None

    async def execute(args: Any, ctx: ToolContext) -> str:
        try:
            return await _in_thread(name, run, ws, args)
        except PathRefused:
            raise
        except OSError as exc:
            code, what = failure
            raise ToolError(
                code, f"{name} could not {what} ({exc.strerror or exc}); try another path"
            ) from None

    return ToolSpec(
        name=name,
        description=read_text(f"{name}.md").strip(),
        params=params,
        execute=execute,
        prepare=prepare,
        validate=validate,
        permission=permission,
        preview=preview,
    )


def _spec(name: str, params: type[BaseModel], run: _Run, ws: WorkspacePaths) -> ToolSpec[Any]:
    return workspace_spec(
        name,
        params,
        run,
        ws,
        prepare=BUILTIN_PREPARE[name],
        check=_CHECKS[name],
        failure=("unreadable", "read a file"),
    )


def _read(workspace: WorkspacePaths, args: ReadFileArgs, stop: threading.Event) -> str:
    return read_file(workspace, args)


def builtin_tools(workspace: WorkspacePaths) -> list[ToolSpec[Any]]:
    """The three read-only workspace tools, confined by ``workspace``."""
    return [
        _spec("read_file", ReadFileArgs, _read, workspace),
        _spec("list_files", ListFilesArgs, list_files, workspace),
        _spec("search_files", SearchFilesArgs, search_files, workspace),
    ]
