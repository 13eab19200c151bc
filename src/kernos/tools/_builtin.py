"""The built-in workspace tools: ``read_file``, ``list_files``, ``search_files``.

Read-only, confined by the workspace policy (:mod:`kernos.tools._paths`), size-capped. They are
registered through the ``kernos.tools`` entry-point group like any plugin (``workspace_tools``).
File work runs in a thread so a large tree never stalls the session's event loop.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import re
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from wcmatch import glob as wcglob

from kernos.boundary import (
    ToolContext,
    ToolError,
    ToolSpec,
    boolean_flag,
    identifier,
    is_blank,
    is_padding_word,
    non_blank_text,
)
from kernos.tools._paths import PathRefused, WorkspacePaths

#: lines ``read_file`` returns when no ``limit`` is given, and the most it returns at once
READ_LINES = 2000
#: a longer line is cut (minified files would otherwise fill the context)
LINE_CHARS = 2000
#: the most text one ``read_file`` call returns
READ_CHARS = 100_000
#: the most paths ``list_files`` returns
LIST_MAX = 500
#: the most matches ``search_files`` returns, and how much of a matching line it shows
SEARCH_MAX = 200
MATCH_CHARS = 300
#: how many bytes are looked at to tell text from binary
SNIFF_BYTES = 8192

BUILTIN_NAMES = ("read_file", "list_files", "search_files")

_GLOB_FLAGS = wcglob.GLOBSTAR | wcglob.BRACE


@cache
def read_text(name: str) -> str:
    """A model-facing text file shipped next to this module (read once per process)."""
    return resources.files("kernos.tools").joinpath(name).read_text(encoding="utf-8")


# -- parameters ---------------------------------------------------------------------------------


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="The file, relative to the workspace root.")
    offset: int | None = Field(
        default=None, ge=0, description="The line to start at (1 = the first line)."
    )
    limit: int | None = Field(
        default=None, ge=0, description=f"How many lines to return (at most {READ_LINES})."
    )


class ListFilesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(
        default="**/*", description="A glob relative to `path`; `**` matches any depth."
    )
    path: str = Field(default=".", description="The directory to list, relative to the root.")


class SearchFilesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(min_length=1, description="A Python regular expression.")
    path: str = Field(default=".", description="The directory to search, relative to the root.")
    glob: str | None = Field(
        default=None, description="Only files matching this glob, e.g. `*.py` or `src/**/*.md`."
    )
    ignore_case: bool = Field(default=False, description="Match regardless of case.")


# -- prepare: padding → absence, with the boundary's helpers -------------------------------------


def _count(value: Any) -> Any:
    """An optional integer: blank or a null word is padding; anything else goes to the schema."""
    return None if is_blank(value) or is_padding_word(value) else value


def _required(value: Any) -> Any:
    """A required text field is never stripped, only trimmed."""
    return value.strip() if isinstance(value, str) else value


def _prepare(fields: dict[str, Callable[[Any], Any]], required: frozenset[str]) -> Any:
    def prepare(raw: Any) -> dict[str, Any]:
        if not isinstance(raw, dict):
            return {}
        out: dict[str, Any] = {}
        for key, value in raw.items():
            helper = fields.get(key)
            if helper is None:
                continue  # a key the tool does not have: dropped, like other padding
            if key in required:
                out[key] = _required(value)
                continue
            cleaned = helper(value)
            if cleaned is not None:
                out[key] = cleaned
        return out

    return prepare


#: each built-in tool's ``prepare``, by name (``kernos demo`` shows what they did)
BUILTIN_PREPARE: dict[str, Callable[[Any], dict[str, Any]]] = {
    "read_file": _prepare(
        {"path": identifier, "offset": _count, "limit": _count}, frozenset({"path"})
    ),
    "list_files": _prepare({"pattern": identifier, "path": identifier}, frozenset()),
    "search_files": _prepare(
        {
            "pattern": non_blank_text,  # a regex keeps its spaces
            "path": identifier,
            "glob": identifier,
            "ignore_case": boolean_flag,
        },
        frozenset({"pattern"}),
    ),
}


# -- reading ------------------------------------------------------------------------------------


def _text_of(workspace: WorkspacePaths, real: Path, shown: str) -> str:
    """The file's text, or a refusal for an oversized, binary or non-UTF-8 file."""
    size = real.stat().st_size
    cap = workspace.max_file_bytes
    if size > cap:
        raise ToolError(
            "file_too_large",
            f"{shown} is {size:,} bytes, over the {cap:,}-byte cap for built-in tools; "
            "use search_files to find the lines you need",
        )
    with real.open("rb") as handle:
        data = handle.read(cap + 1)
    sample = data[:SNIFF_BYTES]
    if b"\x00" in sample:
        raise ToolError("binary_file", f"{shown} is a binary file; read_file reads text files only")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=len(data) <= SNIFF_BYTES)
    except UnicodeDecodeError:
        raise ToolError(
            "binary_file",
            f"{shown} is not UTF-8 text (binary or another encoding); read_file reads UTF-8 text",
        ) from None
    return data.decode("utf-8", errors="replace")


def _lines(count: int) -> str:
    return f"{count} line" if count == 1 else f"{count} lines"


def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[:limit] + " …[line cut]"


def read_file(workspace: WorkspacePaths, args: ReadFileArgs) -> str:
    """Numbered lines of one file, from ``offset`` for ``limit`` lines, capped."""
    real = workspace.resolve(args.path)
    shown = workspace.display(_lexical(workspace, args.path))  # as named, even through a link
    lines = _text_of(workspace, real, shown).splitlines()
    total = len(lines)
    if total == 0:
        return f"{shown} is empty."
    start = max(args.offset or 1, 1)
    if start > total:
        raise ToolError(
            "offset_out_of_range",
            f"offset {start} is past the end of {shown} ({_lines(total)}); "
            f"use an offset from 1 to {total}",
        )
    count = min(args.limit or READ_LINES, READ_LINES)
    body: list[str] = []
    used = 0
    end = start - 1
    for number in range(start, min(start - 1 + count, total) + 1):
        line = f"{number:>6}\t{_cut(lines[number - 1], LINE_CHARS)}"
        if body and used + len(line) + 1 > READ_CHARS:
            break
        body.append(line)
        used += len(line) + 1
        end = number
    if start == 1 and end == total:
        head = f"{shown} ({_lines(total)}):"
    else:
        head = f"{shown} lines {start}-{end} of {total}:"
    tail = (
        f"\n[{_lines(total - end)} more; call read_file with offset={end + 1} to continue]"
        if end < total
        else ""
    )
    return head + "\n" + "\n".join(body) + tail


# -- walking ------------------------------------------------------------------------------------


def _lexical(workspace: WorkspacePaths, path: str) -> Path:
    given = Path(path)
    return Path(os.path.normpath(given if given.is_absolute() else workspace.roots[0] / given))


def _directory(workspace: WorkspacePaths, path: str) -> Path:
    """The lexical directory to walk, once the policy has allowed it."""
    workspace.resolve(path, directory=True)
    return _lexical(workspace, path)


def _files(workspace: WorkspacePaths, base: Path) -> list[Path]:
    """Visible files under ``base``, sorted by path; symlinked directories are not entered (no
    loops), hidden and denied paths never returned."""
    found: list[Path] = []
    for current, dirnames, filenames in os.walk(base, followlinks=False):
        here = Path(current)
        dirnames[:] = [
            d for d in dirnames if not (here / d).is_symlink() and workspace.visible(here / d)
        ]
        for name in filenames:
            candidate = here / name
            if workspace.visible(candidate) and candidate.is_file():
                found.append(candidate)
    return sorted(found, key=lambda p: p.relative_to(base).as_posix())


def _check_glob(pattern: str, field: str) -> None:
    if pattern.startswith(("/", "~")) or ".." in Path(pattern).parts:
        raise ToolError(
            "invalid_pattern",
            f"{field} {pattern!r} must be relative to `path` and stay inside it; "
            "pass the directory as `path` and a relative glob such as **/*.py",
        )


def _matcher(pattern: str, *, names_anywhere: bool) -> Callable[[str], bool]:
    # grep --include style: a glob without '/' matches file names at any depth
    if names_anywhere and "/" not in pattern:
        pattern = "**/" + pattern
    return lambda rel: wcglob.globmatch(rel, pattern, flags=_GLOB_FLAGS)


def list_files(workspace: WorkspacePaths, args: ListFilesArgs) -> str:
    """Files under ``path`` matching ``pattern``, sorted, capped."""
    _check_glob(args.pattern, "pattern")
    base = _directory(workspace, args.path)
    matches = _matcher(args.pattern, names_anywhere=False)
    found = sorted(
        workspace.display(f)
        for f in _files(workspace, base)
        if matches(f.relative_to(base).as_posix())
    )
    where = workspace.display(base)
    if not found:
        return f"No files match {args.pattern} under {where}."
    shown = found[:LIST_MAX]
    text = "\n".join(shown)
    if len(found) > LIST_MAX:
        text += f"\n[{len(found) - LIST_MAX} more files not shown; narrow the pattern or the path]"
    return text


def search_files(workspace: WorkspacePaths, args: SearchFilesArgs) -> str:
    """``path:line: text`` for each line matching the regex, capped; binary files skipped."""
    try:
        regex = re.compile(args.pattern, re.IGNORECASE if args.ignore_case else 0)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise ToolError(
            "invalid_regex",
            f"{args.pattern!r} is not a valid Python regular expression ({exc.msg}{where}); "
            r"escape literal characters such as ( ) [ ] { } . * + ? | \ with a backslash and "
            "call search_files again",
        ) from None
    if args.glob is not None:
        _check_glob(args.glob, "glob")
    base = _directory(workspace, args.path)
    wanted = _matcher(args.glob, names_anywhere=True) if args.glob else None
    lines: list[str] = []
    more = skipped = 0
    for file in _files(workspace, base):
        if wanted is not None and not wanted(file.relative_to(base).as_posix()):
            continue
        shown = workspace.display(file)
        try:
            text = _text_of(workspace, file.resolve(), shown)
        except (ToolError, OSError):
            skipped += 1
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if regex.search(line):
                if len(lines) < SEARCH_MAX:
                    lines.append(f"{shown}:{number}: {_cut(line.strip(), MATCH_CHARS)}")
                else:
                    more += 1
    notes: list[str] = []
    if more:
        notes.append(f"[{more} more matches not shown; narrow the pattern or the glob]")
    if skipped:
        notes.append(f"[{skipped} binary, non-UTF-8 or oversized files skipped]")
    if not lines:
        scope = f" in files matching {args.glob}" if args.glob else ""
        return "\n".join(
            [f"No matches for {args.pattern!r} under {workspace.display(base)}{scope}.", *notes]
        )
    return "\n".join([*lines, *notes])


# -- specs --------------------------------------------------------------------------------------


def _spec(
    name: str,
    params: type[BaseModel],
    run: Callable[[WorkspacePaths, Any], str],
    ws: WorkspacePaths,
) -> ToolSpec[Any]:
    async def execute(args: Any, ctx: ToolContext) -> str:
        try:
            return await asyncio.to_thread(run, ws, args)
        except PathRefused:
            raise
        except OSError as exc:
            raise ToolError(
                "unreadable",
                f"{name} could not read a file ({exc.strerror or exc}); try another path",
            ) from None

    return ToolSpec(
        name=name,
        description=read_text(f"{name}.md").strip(),
        params=params,
        execute=execute,
        prepare=BUILTIN_PREPARE[name],
    )


def builtin_tools(workspace: WorkspacePaths) -> list[ToolSpec[Any]]:
    """The three read-only workspace tools, confined by ``workspace``."""
    return [
        _spec("read_file", ReadFileArgs, read_file, workspace),
        _spec("list_files", ListFilesArgs, list_files, workspace),
        _spec("search_files", SearchFilesArgs, search_files, workspace),
    ]
