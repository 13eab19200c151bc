"""Approved text is written atomically, keeping permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kernos.compress._write import atomic_write, with_trailing_newline


def test_trailing_newline_is_added_only_when_missing() -> None:
    assert with_trailing_newline("a") == "a\n"
    assert with_trailing_newline("a\n") == "a\n"
    assert with_trailing_newline("a\n\n") == "a\n\n"


def test_replace_keeps_permissions_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "p.md"
    target.write_text("old\n")
    target.chmod(0o640)
    atomic_write(target, "new\n")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.md"]


def test_a_new_file_takes_the_source_permissions(tmp_path: Path) -> None:
    source = tmp_path / "src.md"
    source.write_text("x")
    source.chmod(0o600)
    written = atomic_write(tmp_path / "out.md", "y\n", mode_from=source)
    assert stat.S_IMODE(written.stat().st_mode) == 0o600


def test_a_symlink_is_followed_and_kept(tmp_path: Path) -> None:
    real = tmp_path / "real.md"
    real.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    atomic_write(link, "new\n")
    assert link.is_symlink()
    assert real.read_text() == "new\n"


def test_a_failed_replace_leaves_the_original_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "p.md"
    target.write_text("original\n")

    def broken(src: str, dst: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write(target, "new\n")
    assert target.read_text() == "original\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.md"]
