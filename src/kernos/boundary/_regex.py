"""Patterns kernos did not write, compiled so that running them stays bounded.

A regular expression from a model (``search_files``) or from a consumed tool's schema
(``pattern``, ``patternProperties``) is compiled with the ``regex`` package: Python ``re`` syntax
(lookarounds, backreferences) and, unlike ``re``, a per-call ``timeout`` and ``concurrent=True``,
which lets the interpreter run other threads, the event loop and signal handlers while it matches.
Its compiler writes counted repeats out (``a{1000}`` is a thousand nodes; nested ones multiply, and
``a{4294967294}`` exhausts memory), so :func:`compile_pattern` first measures that size with the
pure :func:`pattern_size` and refuses a pattern that is too long or would grow too large.
"""

from __future__ import annotations

import re
from typing import Any

import regex

from kernos.errors import PatternTooComplex as PatternTooComplex

#: the longest pattern :func:`compile_pattern` accepts, in characters
MAX_PATTERN_CHARS = 1000
#: the largest :func:`pattern_size` accepted (a pattern with no counted repeats is its length)
MAX_PATTERN_SIZE = 20_000

_COUNTED = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def pattern_size(pattern: str) -> int:
    """About how many nodes the ``regex`` compiler makes of ``pattern``: each atom counts one, a
    counted repeat ``{m}``/``{m,n}`` multiplies what it repeats by ``m`` (groups nest). Pure; an
    over-estimate where unsure (alternatives are added, not maxed)."""
    sizes = [0]  # the size of each open group, innermost last
    last = 0  # the size of the atom a quantifier would repeat
    i = 0
    end = len(pattern)
    while i < end:
        char = pattern[i]
        if char == "\\":
            i += 2
            sizes[-1] += 1
            last = 1
            continue
        if char == "[":
            i = _class_end(pattern, i)
            sizes[-1] += 1
            last = 1
            continue
        if char == "(":
            sizes.append(0)
            last = 0
        elif char == ")":
            inner = sizes.pop() if len(sizes) > 1 else 0
            sizes[-1] += inner
            last = inner
        elif char == "{" and (counted := _COUNTED.match(pattern, i)) is not None:
            times = max(int(counted.group(1) or 0), 1)
            sizes[-1] += last * (times - 1)
            last *= times
            i = counted.end()
            continue
        else:
            sizes[-1] += 1
            last = 1
        i += 1
    return sum(sizes)


def _class_end(pattern: str, start: int) -> int:
    """The index after the ``]`` that closes the class opened at ``start``."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1  # a leading ']' is a literal
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] == "]":
            return i + 1
        i += 1
    return i


def compile_pattern(pattern: str, flags: int = 0) -> Any:
    """``pattern`` compiled by the ``regex`` package (``re`` syntax), once its size is checked.

    Run the result with ``timeout=`` and ``concurrent=True`` (``search(text, timeout=1.0,
    concurrent=True)``); a match that runs out of time raises :class:`TimeoutError`.

    Raises:
        PatternTooComplex: longer than :data:`MAX_PATTERN_CHARS`, or larger than
            :data:`MAX_PATTERN_SIZE` once counted repeats are written out.
        regex.error: not a valid regular expression (``msg`` and ``pos`` say where).
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternTooComplex(
            f"the pattern is {len(pattern):,} characters long, over the limit of "
            f"{MAX_PATTERN_CHARS:,}; use a shorter pattern"
        )
    size = pattern_size(pattern)
    if size > MAX_PATTERN_SIZE:
        raise PatternTooComplex(
            f"the pattern's counted repeats ({{n}}) make it too large to run (about {size:,} "
            f"steps, the limit is {MAX_PATTERN_SIZE:,}); use smaller counts, + or *"
        )
    return regex.compile(pattern, flags)
