"""FILES arguments to files: globs with ``**`` and braces, dot-files included."""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterable
from pathlib import Path

from kernos.compress._protocol import CompressError
from kernos.compress._write import is_temp_file

_GLOB_CHARS = frozenset("*?[]{}")


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` uses any of ``* ? [ ] { }``."""
    return any(ch in _GLOB_CHARS for ch in pattern)


def _split_top(body: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return parts


def expand_braces(pattern: str) -> list[str]:
    """``a{b,c{d,e}}`` → ``[abd... ]`` as a shell does; an unclosed ``{`` stays literal."""
    depth, start = 0, -1
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                prefix, body, suffix = pattern[:start], pattern[start + 1 : i], pattern[i + 1 :]
                alternatives = _split_top(body)
                tails = expand_braces(suffix)
                if len(alternatives) == 1:  # "{x}" is literal, but what it holds may expand
                    return [
                        f"{prefix}{{{inner}}}{tail}"
                        for inner in expand_braces(body)
                        for tail in tails
                    ]
                return [
                    f"{prefix}{expanded}{tail}"
                    for alternative in alternatives
                    for expanded in expand_braces(alternative)
                    for tail in tails
                ]
    return [pattern]


def resolve_targets(patterns: Iterable[str], cwd: Path | str | None = None) -> list[Path]:
    """Expand FILES arguments into absolute file paths, de-duplicated and sorted.

    Args:
        patterns: literal paths or globs (``* ? [ ] { }``; ``**`` recurses; dot-files match).
        cwd: what relative patterns are relative to (default: the process's working directory).

    Kernos's own temporary files (``.NAME.….kernos-tmp``, left by a crash mid-write) are never
    targets: globs skip them and naming one is an error.

    Raises:
        CompressError: ``No files matched "<pattern>"`` for a glob that matches no file;
            ``Not a file: <path>`` for a literal path that is missing or not a regular file;
            a literal path that is a kernos temporary file.
    """
    base = os.path.abspath(cwd if cwd is not None else os.getcwd())
    found: set[str] = set()
    given = list(patterns)
    if not given:
        raise CompressError("No files given; pass at least one path or glob")
    for pattern in given:
        if not is_glob(pattern):
            path = os.path.normpath(os.path.join(base, pattern))
            if not os.path.isfile(path):
                raise CompressError(f"Not a file: {pattern}")
            if is_temp_file(path):
                raise CompressError(
                    f"{pattern} is a kernos temporary file left by an interrupted write, not a "
                    "prompt; the next run removes it, or delete it yourself"
                )
            found.add(path)
            continue
        matches = [
            os.path.normpath(os.path.join(base, match))
            for alternative in expand_braces(pattern)
            for match in glob.glob(alternative, root_dir=base, recursive=True, include_hidden=True)
        ]
        files = [m for m in matches if os.path.isfile(m) and not is_temp_file(m)]
        literal = os.path.normpath(os.path.join(base, pattern))
        if not files and os.path.isfile(literal) and not is_temp_file(literal):
            # a file whose name holds "[" or "{"
            files = [literal]
        if not files:
            raise CompressError(f'No files matched "{pattern}"')
        found.update(files)
    return [Path(p) for p in sorted(found)]


def display_path(path: Path, cwd: Path | None = None) -> str:
    """``path`` relative to ``cwd`` (default: the working directory) when inside it, else as is."""
    with contextlib.suppress(ValueError):
        return str(path.relative_to(cwd or Path.cwd()))
    return str(path)
