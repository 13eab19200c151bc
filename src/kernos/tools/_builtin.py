"""The built-in workspace tools: ``read_file``, ``list_files``, ``search_files``.

Read-only, confined by the workspace policy (:mod:`kernos.tools._paths`), size-capped. They are
registered through the ``kernos.tools`` entry-point group like any plugin (``workspace_tools``).
File work runs in a thread so a large tree never stalls the session's event loop.
"""

from __future__ import annotations

import bisect
import codecs
import errno
import functools
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import regex
from pydantic import BaseModel, ConfigDict, Field
from wcmatch import glob as wcglob

from kernos.boundary import (
    PatternTooComplex,
    ToolError,
    boolean_flag,
    compile_pattern,
    identifier,
    is_blank,
    is_padding_word,
    non_blank_text,
)
from kernos.runtime import NotRegularFile, open_regular
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
#: the time one ``search_files`` call may take, matching included (each match gets what is left)
SEARCH_SECONDS = 5.0
#: a longer line is searched only up to here (a pattern's cost grows with the text it runs over)
SEARCH_LINE_CHARS = 4000
#: walks go this many directories below ``path``; deeper ones are skipped with a note
WALK_DEPTH = 64
#: a walk looks at this many directory entries at most, then stops with a note
WALK_ENTRIES = 50_000

BUILTIN_NAMES = ("read_file", "list_files", "search_files")

_GLOB_FLAGS = wcglob.GLOBSTAR | wcglob.BRACE


@functools.cache
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
    """The file's text, or a refusal for an oversized, binary or non-UTF-8 file.

    ``real`` was checked by the policy; between that check and the ``open`` it may have become a
    symlink, a pipe or a path through a swapped directory, so what is opened is checked again
    before a byte is read (:func:`kernos.runtime.open_regular`, as attachments are)."""
    try:
        handle, opened = open_regular(real)
    except NotRegularFile:
        raise PathRefused(
            f"{shown} is not a regular file (a directory, pipe or device, or it changed while "
            "it was being opened); call list_files to see which files exist"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW: the checked file became a symlink
            raise PathRefused(
                f"{shown} changed into a symlink while it was being opened; name the file it "
                "points to, inside the workspace"
            ) from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise PathRefused(
                f"{shown} disappeared while it was being opened; call list_files to see which "
                "files exist"
            ) from None
        raise
    with handle:
        if not workspace.visible(Path(opened)):  # a directory above it was swapped meanwhile
            raise PathRefused(
                f"{shown} changed while it was being opened and now leads outside what tools "
                "may read; name a path inside the workspace"
            )
        size = os.fstat(handle.fileno()).st_size
        cap = workspace.max_file_bytes
        if size > cap:
            raise ToolError(
                "file_too_large",
                f"{shown} is {size:,} bytes, over the {cap:,}-byte cap for built-in tools; "
                "use search_files to find the lines you need",
            )
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
    _no_nul(args.path, "path", "invalid_path")
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
    _no_nul(path, "path", "invalid_path")
    workspace.resolve(path, directory=True)
    return _lexical(workspace, path)


@dataclass
class _Walk:
    """The visible files under a directory, and what the walk's bounds left out."""

    files: list[Path] = field(default_factory=list)
    too_deep: int = 0  # directories not entered: more than WALK_DEPTH below the base
    stopped: bool = False  # the entry cap was reached
    cap: int = WALK_ENTRIES

    def notes(self, where: str) -> list[str]:
        notes: list[str] = []
        if self.too_deep:
            notes.append(
                f"[{self.too_deep} directories more than {WALK_DEPTH} levels below {where} were "
                "not entered; name a deeper path to look inside them]"
            )
        if self.stopped:
            notes.append(
                f"[the walk stopped after {self.cap:,} entries, so some files were not "
                "looked at; name a narrower path]"
            )
        return notes


def _files(
    workspace: WorkspacePaths,
    base: Path,
    stop: threading.Event | None = None,
    *,
    max_entries: int = WALK_ENTRIES,
) -> _Walk:
    """Visible files under ``base``, sorted by path; symlinked directories are not entered (no
    loops), hidden and denied paths never returned. Iterative, at most :data:`WALK_DEPTH` levels
    deep and :data:`WALK_ENTRIES` entries long (a deep tree must not fail the whole call)."""
    walk = _Walk(cap=max_entries)
    pending = [(base, 0)]
    seen = 0
    while pending:
        here, depth = pending.pop()
        try:
            with os.scandir(here) as listing:
                entries = list(listing)
        except OSError:  # gone, unreadable, or swapped for something that is not a directory
            continue
        for entry in entries:
            seen += 1
            if seen > max_entries or (stop is not None and stop.is_set()):
                walk.stopped = seen > max_entries
                pending.clear()
                break
            candidate = here / entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = not is_dir and entry.is_file()
            except OSError:
                continue
            if is_dir:
                if not workspace.visible(candidate):
                    continue
                if depth >= WALK_DEPTH:
                    walk.too_deep += 1
                else:
                    pending.append((candidate, depth + 1))
            elif is_file and workspace.visible(candidate):
                walk.files.append(candidate)
    walk.files.sort(key=lambda p: p.relative_to(base).as_posix())
    return walk


def _no_nul(value: str, field: str, code: str) -> None:
    if "\x00" in value:
        raise ToolError(
            code,
            f"{field} contains a NUL byte (\\x00), which no file name or text file holds; "
            "remove it and call again",
        )


def _check_glob(pattern: str, field: str) -> None:
    _no_nul(pattern, field, "invalid_pattern")
    if pattern.startswith(("/", "~")) or ".." in Path(pattern).parts:
        raise ToolError(
            "invalid_pattern",
            f"{field} {pattern!r} must be relative to `path` and stay inside it; "
            "pass the directory as `path` and a relative glob such as **/*.py",
        )


def _matcher(pattern: str, field: str, *, names_anywhere: bool) -> Callable[[str], bool]:
    _check_glob(pattern, field)
    # grep --include style: a glob without '/' matches file names at any depth
    if names_anywhere and "/" not in pattern:
        pattern = "**/" + pattern
    try:
        compiled = wcglob.compile(pattern, flags=_GLOB_FLAGS)
    except Exception as exc:  # wcmatch's PatternLimitException is not public
        if "limit" not in str(exc).lower():
            raise
        raise ToolError(
            "invalid_pattern",
            f"{field} expands to too many patterns ({exc}): every {{a,b}} multiplies them; use "
            "fewer alternatives, or call again once per alternative",
        ) from None
    return lambda rel: bool(compiled.match(rel))


def _regex(pattern: str, ignore_case: bool) -> Any:
    """The model's pattern compiled for a bounded run (:func:`kernos.boundary.compile_pattern`)."""
    _no_nul(pattern, "pattern", "invalid_regex")
    flags = re.IGNORECASE if ignore_case else 0
    try:
        re.compile(pattern, flags)  # the syntax the description promises, with re's messages
        return compile_pattern(pattern, regex.IGNORECASE if ignore_case else 0)
    except PatternTooComplex as exc:
        raise ToolError("pattern_too_complex", f"{exc}, and call search_files again") from None
    except (re.error, regex.error) as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise ToolError(
            "invalid_regex",
            f"{pattern!r} is not a valid Python regular expression ({exc.msg}{where}); "
            r"escape literal characters such as ( ) [ ] { } . * + ? | \ with a backslash and "
            "call search_files again",
        ) from None


def list_files(
    workspace: WorkspacePaths, args: ListFilesArgs, stop: threading.Event | None = None
) -> str:
    """Files under ``path`` matching ``pattern``, sorted, capped."""
    matches = _matcher(args.pattern, "pattern", names_anywhere=False)
    base = _directory(workspace, args.path)
    walk = _files(workspace, base, stop)
    found = sorted(
        workspace.display(f) for f in walk.files if matches(f.relative_to(base).as_posix())
    )
    where = workspace.display(base)
    notes = walk.notes(where)
    if not found:
        return "\n".join([f"No files match {args.pattern} under {where}.", *notes])
    shown = found[:LIST_MAX]
    if len(found) > LIST_MAX:
        notes.insert(
            0, f"[{len(found) - LIST_MAX} more files not shown; narrow the pattern or the path]"
        )
    return "\n".join([*shown, *notes])


#: constructs whose match on one line need not be a match at the same place in the whole file:
#: lookarounds see past the line, and \A \Z \z \G anchor to the string, not the line (a named
#: group ``(?<name>`` is caught by ``(?<`` too: only the shortcut is lost)
_NOT_LINE_LOCAL = ("(?=", "(?!", "(?<", "\\A", "\\Z", "\\z", "\\G")
#: line breaks ``str.splitlines`` knows besides ``\n``: a file holding one is searched line by line
_OTHER_BREAKS = re.compile("[\\r\\x0b\\x0c\\x1c-\\x1e\\x85\\u2028\\u2029]")


def _whole_text(pattern: str, ignore_case: bool) -> Any | None:
    """The pattern compiled to run over a whole file (``^``/``$`` at each line), or None when a
    match on a line might not be one in the whole file (:data:`_NOT_LINE_LOCAL`).

    Where it exists, a line that matches on its own also has a match starting at the same place in
    the whole file, so the whole-file search may skip every line before its next match, and a
    whole-file match that ends inside its line is a match of that line alone: about one bounded
    call per matching line instead of one per line (``regex``'s timeout makes every call and
    every step dearer; ``bench/workspace.py`` measures it)."""
    if any(marker in pattern for marker in _NOT_LINE_LOCAL):
        return None
    flags = regex.MULTILINE | (regex.IGNORECASE if ignore_case else 0)
    return compile_pattern(pattern, flags)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _matching_lines(
    pattern: Any, whole: Any | None, text: str, deadline: float
) -> tuple[list[tuple[int, str]], int]:
    """The (number, line) pairs of ``text`` whose line the pattern matches, each line searched
    alone up to :data:`SEARCH_LINE_CHARS`, and how many lines were longer than that.

    Raises:
        TimeoutError: past ``deadline``.
    """
    lines = text.splitlines()
    long_lines = sum(1 for line in lines if len(line) > SEARCH_LINE_CHARS)
    found: list[tuple[int, str]] = []
    if whole is None or long_lines or _OTHER_BREAKS.search(text):
        for number, line in enumerate(lines, start=1):
            hit = pattern.search(
                line, 0, SEARCH_LINE_CHARS, timeout=_left(deadline), concurrent=True
            )
            if hit:
                found.append((number, line))
        return found, long_lines
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    position = 0
    while position < len(text):
        candidate = whole.search(text, position, timeout=_left(deadline), concurrent=True)
        if candidate is None:
            break
        index = bisect.bisect_right(starts, candidate.start()) - 1
        if index >= len(lines):
            break
        line = lines[index]
        if candidate.end() <= starts[index] + len(line) or pattern.search(
            line, 0, SEARCH_LINE_CHARS, timeout=_left(deadline), concurrent=True
        ):  # a match inside the line is one on the line alone; one past its end is checked
            found.append((index + 1, line))
        position = starts[index + 1]
    return found, long_lines


def _too_slow(args: SearchFilesArgs) -> ToolError:
    return ToolError(
        "pattern_too_slow",
        f"searching for {args.pattern!r} took longer than {SEARCH_SECONDS:g} seconds, so it was "
        "stopped and nothing is shown; simplify the pattern (nested repeats such as (a+)+ are "
        "slow), or narrow `path` or `glob`, and call search_files again",
    )


def search_files(
    workspace: WorkspacePaths, args: SearchFilesArgs, stop: threading.Event | None = None
) -> str:
    """``path:line: text`` for each line matching the regex, capped; binary files skipped.

    The whole call has :data:`SEARCH_SECONDS`; each match runs with what is left as its timeout
    (``regex`` releases the GIL meanwhile), and running out is the coded ``pattern_too_slow``."""
    deadline = time.monotonic() + SEARCH_SECONDS
    pattern = _regex(args.pattern, args.ignore_case)
    whole = _whole_text(args.pattern, args.ignore_case)
    wanted = _matcher(args.glob, "glob", names_anywhere=True) if args.glob else None
    base = _directory(workspace, args.path)
    walk = _files(workspace, base, stop)
    lines: list[str] = []
    more = skipped = cut = 0
    for file in walk.files:
        if stop is not None and stop.is_set():
            raise _too_slow(args)  # nobody waits for this answer any more
        if wanted is not None and not wanted(file.relative_to(base).as_posix()):
            continue
        shown = workspace.display(file)
        try:
            text = _text_of(workspace, file.resolve(), shown)
        except (ToolError, OSError):
            skipped += 1
            continue
        try:
            found_lines, long_lines = _matching_lines(pattern, whole, text, deadline)
        except TimeoutError:
            raise _too_slow(args) from None
        cut += long_lines
        for number, line in found_lines:
            if len(lines) < SEARCH_MAX:
                lines.append(f"{shown}:{number}: {_cut(line.strip(), MATCH_CHARS)}")
            else:
                more += 1
    notes: list[str] = []
    if more:
        notes.append(f"[{more} more matches not shown; narrow the pattern or the glob]")
    if skipped:
        notes.append(f"[{skipped} binary, non-UTF-8 or oversized files skipped]")
    if cut:
        notes.append(
            f"[{cut} lines longer than {SEARCH_LINE_CHARS:,} characters were searched only in "
            "their first part]"
        )
    notes.extend(walk.notes(workspace.display(base)))
    if not lines:
        scope = f" in files matching {args.glob}" if args.glob else ""
        return "\n".join(
            [f"No matches for {args.pattern!r} under {workspace.display(base)}{scope}.", *notes]
        )
    return "\n".join([*lines, *notes])
