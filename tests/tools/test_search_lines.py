"""search_files' whole-file shortcut finds exactly the lines a line-by-line search finds."""

from __future__ import annotations

import time

from hypothesis import example, given, settings
from hypothesis import strategies as st

from kernos.tools._builtin import _matching_lines, _regex, _whole_text

PATTERNS = [
    "a", "ab", "^a", "a$", "^$", "b+c", r"\bab\b", r"a\s*b", r"[^a]b", r"a.b", "x*", r"(a)\1",
    r"\sa", r"a\n?b", "(?s)a.b", "(?i)AB", r"^\w+$", r"(?=a)", r"\Aa", r"b\Z", r"a(?!\nb)",
    r"(?<!a\n)b",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@example(lines=["", "a"], pattern=r"\Aa", ignore_case=False, ending="")  # \A: the string's start
@example(lines=["b", "c"], pattern=r"b\Z", ignore_case=False, ending="")
@example(lines=["a", "b"], pattern=r"a(?!\nb)", ignore_case=False, ending="")  # sees the next line
@example(lines=["a", "b"], pattern=r"(?<!a\n)b", ignore_case=False, ending="")  # and the one before
@example(lines=["a", "b"], pattern=r"a\s*b", ignore_case=False, ending="")  # crosses in the file
@given(
    lines=st.lists(st.text(alphabet="ab c\t", max_size=8), max_size=8),
    pattern=st.sampled_from(PATTERNS),
    ignore_case=st.booleans(),
    ending=st.sampled_from(["", "\n"]),
)
def test_the_whole_file_shortcut_finds_the_same_lines(
    lines: list[str], pattern: str, ignore_case: bool, ending: str
) -> None:
    text = "\n".join(lines) + ending
    deadline = time.monotonic() + 60
    line_by_line = _matching_lines(_regex(pattern, ignore_case), None, text, deadline)
    whole = _whole_text(pattern, ignore_case)
    shortcut = _matching_lines(_regex(pattern, ignore_case), whole, text, deadline)
    assert shortcut == line_by_line
