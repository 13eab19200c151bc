"""The built-in write tools: ``write_file`` and ``edit_file``.

Confined by the same workspace policy as the read tools (:mod:`kernos.tools._paths`: no hidden
paths, no state directory, no symlink out, the size cap); a file is replaced atomically (a
temporary file beside it, renamed over it) keeping its mode. Their own permission rule is
``ask``: a person approves each call unless the rules say otherwise, and sees the unified diff
(``preview``).
"""

from __future__ import annotations

import contextlib
import difflib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kernos.boundary import ToolContext, ToolError, ToolSpec, boolean_flag, identifier
from kernos.tools._builtin import _no_nul, _prepare
from kernos.tools._builtin_specs import workspace_spec
from kernos.tools._paths import PathRefused, WorkspacePaths

WRITE_NAMES = ("write_file", "edit_file")
#: the lines of a diff a person is shown before the rest is summarised
DIFF_LINES = 400


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="The file, relative to the workspace root.")
    content: str = Field(description="The whole new text of the file.")


class EditFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="The file, relative to the workspace root.")
    old_string: str = Field(min_length=1, description="The exact text to replace.")
    new_string: str = Field(description="The text to put in its place.")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence (default: exactly one must exist)."
    )


def _keep(value: Any) -> Any:
    """Text written as given: never trimmed, never treated as padding."""
    return value


WRITE_PREPARE = {
    "write_file": _prepare({"path": identifier, "content": _keep}, frozenset({"path"})),
    "edit_file": _prepare(
        {
            "path": identifier,
            "old_string": _keep,
            "new_string": _keep,
            "replace_all": boolean_flag,
        },
        frozenset({"path"}),
    ),
}


def _shown(workspace: WorkspacePaths, path: str) -> str:
    given = Path(path)
    lexical = Path(os.path.normpath(given if given.is_absolute() else workspace.roots[0] / given))
    return workspace.display(lexical)


def _current(workspace: WorkspacePaths, real: Path, shown: str) -> str | None:
    """The file's text now (``None``: it does not exist yet); refused when too large or binary."""
    try:
        info = real.stat()
    except FileNotFoundError:
        return None
    cap = workspace.max_file_bytes
    if info.st_size > cap:
        raise ToolError(
            "file_too_large",
            f"{shown} is {info.st_size:,} bytes, over the {cap:,}-byte cap for built-in tools; "
            "it cannot be edited here",
        )
    data = real.read_bytes()
    if b"\x00" in data[:8192]:
        raise ToolError("binary_file", f"{shown} is a binary file; the write tools edit text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(
            "binary_file", f"{shown} is not UTF-8 text; the write tools edit UTF-8 text"
        ) from None


def _check_size(workspace: WorkspacePaths, text: str, shown: str) -> None:
    size = len(text.encode("utf-8"))
    if size > workspace.max_file_bytes:
        raise ToolError(
            "file_too_large",
            f"the new {shown} would be {size:,} bytes, over the {workspace.max_file_bytes:,}-byte "
            "cap for built-in tools; write a smaller file",
        )


def edited(text: str, args: EditFileArgs, shown: str) -> tuple[str, int]:
    """``text`` with ``old_string`` replaced, and how many times. Pure.

    Raises:
        ToolError: ``old_string_not_found``, ``old_string_not_unique`` (with the count) or
            ``no_change``.
    """
    if args.old_string == args.new_string:
        raise ToolError(
            "no_change", "old_string and new_string are the same; pass the text to put instead"
        )
    count = text.count(args.old_string)
    if count == 0:
        raise ToolError(
            "old_string_not_found",
            f"old_string was not found in {shown}; read_file it and copy the exact text, "
            "whitespace and line breaks included",
        )
    if count > 1 and not args.replace_all:
        raise ToolError(
            "old_string_not_unique",
            f"old_string occurs {count} times in {shown}; add surrounding lines to make it "
            "unique, or pass replace_all=true to replace all of them",
            details={"count": count},
        )
    if args.replace_all:
        return text.replace(args.old_string, args.new_string), count
    return text.replace(args.old_string, args.new_string, 1), 1


def _new_text(workspace: WorkspacePaths, args: Any) -> tuple[Path, str, str | None, str]:
    """``(real path, shown path, current text, new text)`` of a write or edit."""
    _no_nul(args.path, "path", "invalid_path")
    real = workspace.writable(args.path)
    shown = _shown(workspace, args.path)
    before = _current(workspace, real, shown)
    if isinstance(args, WriteFileArgs):
        after = args.content
    else:
        if before is None:
            raise ToolError(
                "not_found",
                f"{shown} does not exist; create it with write_file, or list_files to find it",
            )
        after, _ = edited(before, args, shown)
    _check_size(workspace, after, shown)
    return real, shown, before, after


def unified_diff(shown: str, before: str | None, after: str) -> str:
    """The unified diff of a write, capped at :data:`DIFF_LINES` lines. Pure."""
    lines = list(
        difflib.unified_diff(
            (before or "").splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile="/dev/null" if before is None else f"a/{shown}",
            tofile=f"b/{shown}",
        )
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines[:DIFF_LINES])
    if len(lines) > DIFF_LINES:
        text += f"[{len(lines) - DIFF_LINES} more diff lines not shown]\n"
    return text or "(no change)\n"


def replace_atomically(real: Path, text: str) -> None:
    """Write ``text`` to ``real`` through a temporary file beside it renamed over it; an existing
    file's mode is kept, a new one gets the umask's default."""
    try:
        mode: int | None = stat.S_IMODE(real.stat().st_mode)
    except FileNotFoundError:
        mode = None
    real.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(
        prefix=f".{real.name}.{os.getpid()}.", suffix=".kernos-tmp", dir=real.parent
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            if mode is None:
                umask = os.umask(0)
                os.umask(umask)
                mode = 0o666 & ~umask
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _lines(text: str) -> int:
    return len(text.splitlines())


def write_file(workspace: WorkspacePaths, args: WriteFileArgs) -> str:
    real, shown, before, after = _new_text(workspace, args)
    replace_atomically(real, after)
    verb = "Created" if before is None else "Replaced"
    return f"{verb} {shown} ({_lines(after)} lines, {len(after.encode('utf-8')):,} bytes)."


def edit_file(workspace: WorkspacePaths, args: EditFileArgs) -> str:
    real, shown, before, after = _new_text(workspace, args)
    assert before is not None
    _, count = edited(before, args, shown)
    replace_atomically(real, after)
    times = "1 occurrence" if count == 1 else f"{count} occurrences"
    return f"Edited {shown}: replaced {times}."


def _preview(workspace: WorkspacePaths) -> Any:
    def preview(args: Any, ctx: ToolContext) -> str | None:
        try:
            _, shown, before, after = _new_text(workspace, args)
        except (ToolError, PathRefused, OSError):
            return None  # the call fails the same way when it runs
        return unified_diff(shown, before, after)

    return preview


def _check(args: Any) -> None:
    _no_nul(args.path, "path", "invalid_path")


def _spec(name: str, params: type[BaseModel], run: Any, ws: WorkspacePaths) -> ToolSpec[Any]:
    return workspace_spec(
        name,
        params,
        lambda w, a, stop: run(w, a),
        ws,
        prepare=WRITE_PREPARE[name],
        check=_check,
        failure=("unwritable", "write the file"),
        permission="ask",
        preview=_preview(ws),
    )


def write_tools(workspace: WorkspacePaths) -> list[ToolSpec[Any]]:
    """``write_file`` and ``edit_file``, confined by ``workspace``; their own rule is ``ask``."""
    return [
        _spec("write_file", WriteFileArgs, write_file, workspace),
        _spec("edit_file", EditFileArgs, edit_file, workspace),
    ]
