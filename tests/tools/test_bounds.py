"""The built-in tools under hostile input: a slow regex, a path swapped between check and open, a
pipe, a tree 1,500 levels deep, NUL bytes and brace bombs. Each ends in an answer, never a hang,
a traceback or a byte from outside the workspace."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernos.boundary import ToolResult, call_tool
from kernos.tools import LocalWorkspace, builtin_tools
from kernos.tools._builtin import (
    SEARCH_LINE_CHARS,
    SEARCH_SECONDS,
    WALK_DEPTH,
    _files,
    read_text,
)

SECRET = "OUTSIDE-SECRET-4f2a"
#: a hard bound on any one call here: a hang fails the test instead of the suite
CALL_LIMIT = 60


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("inside text\n")
    (tmp_path / "outside.txt").write_text(f"{SECRET}\n")
    return root


async def call(root: Path, name: str, args: Any) -> ToolResult:
    specs = {s.name: s for s in builtin_tools(LocalWorkspace([root]))}
    return await asyncio.wait_for(call_tool(specs[name], args), CALL_LIMIT)


# -- bounded patterns -------------------------------------------------------------------------


async def test_a_pathological_pattern_is_stopped_with_a_code_and_the_loop_runs_meanwhile(
    ws: Path,
) -> None:
    (ws / "slow.txt").write_text("a" * 2000 + "!\n")
    search = asyncio.ensure_future(call(ws, "search_files", {"pattern": "(a+)+$"}))
    ticks = 0
    while not search.done():
        await asyncio.sleep(0.01)  # the loop's own work, counted: what the test measures
        ticks += 1
    assert ticks > 10  # with `re` the loop's thread would not get the GIL back until the end
    result = await search
    assert result.code == "pattern_too_slow"
    assert result.text == (
        f"searching for '(a+)+$' took longer than {SEARCH_SECONDS:g} seconds, so it was stopped "
        "and nothing is shown; simplify the pattern (nested repeats such as (a+)+ are slow), or "
        "narrow `path` or `glob`, and call search_files again"
    )


async def test_a_long_line_is_searched_only_up_to_the_cap(ws: Path) -> None:
    (ws / "wide.txt").write_text("x" * SEARCH_LINE_CHARS + "needle\nneedle here\n")
    result = await call(ws, "search_files", {"pattern": "needle"})
    assert result.text.splitlines() == [
        "wide.txt:2: needle here",
        f"[1 lines longer than {SEARCH_LINE_CHARS:,} characters were searched only in their "
        "first part]",
    ]


@pytest.mark.parametrize(
    ("pattern", "code", "says"),
    [
        ("x" * 1001, "pattern_too_complex", "1,001 characters long, over the limit of 1,000"),
        ("a{4294967294}", "pattern_too_complex", "use smaller counts, + or *"),
        ("(?:(?:a{100}){100}){100}", "pattern_too_complex", "too large to run"),
        ("a\x00", "invalid_regex", "contains a NUL byte"),
        ("f(x", "invalid_regex", "not a valid Python regular expression"),
    ],
)
async def test_patterns_that_cannot_run_are_coded_refusals(
    ws: Path, pattern: str, code: str, says: str
) -> None:
    result = await call(ws, "search_files", {"pattern": pattern})
    assert (result.code, result.is_error) == (code, True)
    assert says in result.text and "call" in result.text and "again" in result.text


async def test_lookarounds_and_backreferences_still_work(ws: Path) -> None:
    (ws / "words.txt").write_text("hello hello\nfoobar\nfoobaz\n")
    twice = await call(ws, "search_files", {"pattern": r"\b(\w+) \1\b"})
    assert twice.text == "words.txt:1: hello hello"
    ahead = await call(ws, "search_files", {"pattern": r"foo(?!bar)"})
    assert ahead.text == "words.txt:3: foobaz"


def test_the_description_states_the_bounds() -> None:
    text = read_text("search_files.md")
    assert f"{SEARCH_SECONDS:g} seconds" in text and "pattern_too_slow" in text
    assert f"first {SEARCH_LINE_CHARS} characters" in text
    assert f"more than {WALK_DEPTH} levels" in read_text("list_files.md")


# -- coded refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "code"),
    [
        ("read_file", {"path": "notes\x00.txt"}, "invalid_path"),
        ("list_files", {"path": "a\x00b"}, "invalid_path"),
        ("list_files", {"pattern": "*\x00.txt"}, "invalid_pattern"),
        ("search_files", {"pattern": "x", "path": "\x00"}, "invalid_path"),
        ("search_files", {"pattern": "x", "glob": "*.md\x00"}, "invalid_pattern"),
    ],
)
async def test_a_nul_byte_is_a_coded_refusal(
    ws: Path, name: str, args: dict[str, str], code: str
) -> None:
    result = await call(ws, name, args)
    assert (result.code, result.is_error) == (code, True)
    assert "contains a NUL byte" in result.text and "remove it and call again" in result.text


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("list_files", {"pattern": "{" + ",".join(map(str, range(2000))) + "}"}),
        ("search_files", {"pattern": "x", "glob": "{a,b}" * 12}),
    ],
)
async def test_a_brace_bomb_is_a_coded_refusal(ws: Path, name: str, args: dict[str, str]) -> None:
    result = await call(ws, name, args)
    assert result.code == "invalid_pattern"
    assert "expands to too many patterns" in result.text
    assert "use fewer alternatives, or call again once per alternative" in result.text


# -- open, then check -------------------------------------------------------------------------


@pytest.fixture
def flipping(ws: Path, tmp_path: Path) -> Iterator[threading.Event]:
    """A thread turns ws/flip.txt (and ws/dir, the directory above ws/dir/flip.txt) into
    symlinks to outside the workspace and back, and flip.txt into a pipe, 1,000 times; the
    event is set when it is done."""
    (tmp_path / "outdir").mkdir()
    (tmp_path / "outdir" / "flip.txt").write_text(f"{SECRET}\n")
    (ws / "dir").mkdir()
    (ws / "dir" / "flip.txt").write_text("inside\n")
    (ws / "flip.txt").write_text("inside\n")
    done = threading.Event()

    def swap(make: Any, target: Path) -> None:
        spare = target.with_name(".spare")
        make(spare)
        os.replace(spare, target)

    def write(path: Path) -> None:
        path.write_text("inside\n")

    def flip() -> None:
        try:
            for _ in range(1000):
                swap(lambda p: os.symlink(tmp_path / "outside.txt", p), ws / "flip.txt")
                swap(write, ws / "flip.txt")
                swap(os.mkfifo, ws / "flip.txt")
                swap(write, ws / "flip.txt")
                os.rename(ws / "dir", ws / ".realdir")
                os.symlink(tmp_path / "outdir", ws / "dir")
                os.unlink(ws / "dir")
                os.rename(ws / ".realdir", ws / "dir")
        finally:
            done.set()

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    yield done
    thread.join(CALL_LIMIT)


@pytest.mark.timeout(120)
async def test_a_path_swapped_between_check_and_open_never_leaks(
    ws: Path, flipping: threading.Event
) -> None:
    calls = [
        ("read_file", {"path": "flip.txt"}),
        ("read_file", {"path": "dir/flip.txt"}),
        ("search_files", {"pattern": "."}),
    ]
    answers: list[ToolResult] = []
    while not flipping.is_set():
        for name, args in calls:
            answers.append(await call(ws, name, args))
    assert not [a.text for a in answers if SECRET in a.text]
    assert {a.code for a in answers} <= {None, "path_refused"}
    assert any(not a.is_error and "inside" in a.text for a in answers)


@pytest.mark.timeout(120)
async def test_a_pipe_never_blocks_the_tools(ws: Path) -> None:
    os.mkfifo(ws / "pipe.txt")  # nobody writes to it: a blocking open or read waits forever
    read = await call(ws, "read_file", {"path": "pipe.txt"})
    assert read.code == "path_refused"
    searched = await call(ws, "search_files", {"pattern": "inside"})
    assert searched.text == "notes.txt:1: inside text"
    listed = await call(ws, "list_files", {})
    assert listed.text == "notes.txt"


# -- bounded walks ----------------------------------------------------------------------------


async def test_a_tree_1500_levels_deep_is_walked_to_the_depth_limit(ws: Path) -> None:
    levels: list[str] = []
    deep = str(ws)
    for _ in range(1500):  # one level at a time: pathlib's mkdir(parents=True) recurses
        deep += "/d"
        os.mkdir(deep)
        levels.append(deep)
    Path(deep, "bottom.txt").write_text("inside text\n")
    (ws / "d" / "top.txt").write_text("inside text\n")
    try:
        await _walk_the_deep_tree(ws)
    finally:  # bottom up: pytest's own clean-up of old temporary trees (shutil.rmtree) recurses
        os.remove(Path(deep, "bottom.txt"))
        os.remove(ws / "d" / "top.txt")
        for level in reversed(levels):
            os.rmdir(level)


async def _walk_the_deep_tree(ws: Path) -> None:
    note = (
        f"[1 directories more than {WALK_DEPTH} levels below . were not entered; name a deeper "
        "path to look inside them]"
    )
    listed = await call(ws, "list_files", {})
    assert listed.text.splitlines() == ["d/top.txt", "notes.txt", note]
    searched = await call(ws, "search_files", {"pattern": "inside"})
    assert searched.text.splitlines() == [
        "d/top.txt:1: inside text",
        "notes.txt:1: inside text",
        note,
    ]


def test_a_walk_stops_after_its_entry_cap_with_a_note(ws: Path) -> None:
    for number in range(12):
        (ws / f"{number:02}.txt").touch()
    walk = _files(LocalWorkspace([ws]), ws, max_entries=10)
    assert len(walk.files) == 10 and walk.stopped
    assert walk.notes(".") == [
        "[the walk stopped after 10 entries, so some files were not looked at; name a narrower "
        "path]"
    ]
    assert not _files(LocalWorkspace([ws]), ws).stopped
