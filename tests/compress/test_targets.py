"""FILES arguments become absolute, de-duplicated, sorted files."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernos.compress import CompressError, resolve_targets
from kernos.compress._targets import expand_braces


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ["a.md", "b.md", "c.txt", ".hidden.md", "sub/d.md", "sub/deep/e.md", "x[1].md"]:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    return tmp_path


def names(paths: list[Path], root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in paths]


def test_globs_expand_deduplicate_and_sort(tree: Path) -> None:
    found = resolve_targets(["b.md", "*.md", "a.md", "./a.md"], cwd=tree)
    assert all(p.is_absolute() for p in found)
    assert names(found, tree) == [".hidden.md", "a.md", "b.md", "x[1].md"]


def test_double_star_recurses_and_dot_files_are_included(tree: Path) -> None:
    assert names(resolve_targets(["**/*.md"], cwd=tree), tree) == [
        ".hidden.md",
        "a.md",
        "b.md",
        "sub/d.md",
        "sub/deep/e.md",
        "x[1].md",
    ]


def test_braces_question_marks_and_classes(tree: Path) -> None:
    assert names(resolve_targets(["{a,c}.*"], cwd=tree), tree) == ["a.md", "c.txt"]
    assert names(resolve_targets(["?.md"], cwd=tree), tree) == ["a.md", "b.md"]
    assert names(resolve_targets(["[ab].md"], cwd=tree), tree) == ["a.md", "b.md"]
    assert names(resolve_targets(["sub/{d.md,deep/*.md}"], cwd=tree), tree) == [
        "sub/d.md",
        "sub/deep/e.md",
    ]


def test_absolute_patterns_and_literal_names_with_glob_characters(tree: Path) -> None:
    assert names(resolve_targets([str(tree / "sub" / "*.md")]), tree) == ["sub/d.md"]
    assert names(resolve_targets(["x[1].md"], cwd=tree), tree) == ["x[1].md"]


def test_a_pattern_matching_nothing_fails_loudly(tree: Path) -> None:
    with pytest.raises(CompressError) as caught:
        resolve_targets(["a.md", "*.rst"], cwd=tree)
    assert str(caught.value) == 'No files matched "*.rst"'
    with pytest.raises(CompressError) as caught:
        resolve_targets(["su[b]"], cwd=tree)  # matches only a directory
    assert str(caught.value) == 'No files matched "su[b]"'


def test_a_missing_literal_path_fails(tree: Path) -> None:
    with pytest.raises(CompressError) as caught:
        resolve_targets(["missing.md"], cwd=tree)
    assert str(caught.value) == "Not a file: missing.md"
    with pytest.raises(CompressError, match=r"^Not a file: sub$"):
        resolve_targets(["sub"], cwd=tree)


def test_brace_expansion_rules() -> None:
    assert expand_braces("a{b,c}d") == ["abd", "acd"]
    assert expand_braces("{a,b}{1,2}") == ["a1", "a2", "b1", "b2"]
    assert expand_braces("x{a,b{c,d}}") == ["xa", "xbc", "xbd"]
    assert expand_braces("{x}") == ["{x}"]
    assert expand_braces("{x{a,b}}") == ["{xa}", "{xb}"]
    assert expand_braces("open{") == ["open{"]
