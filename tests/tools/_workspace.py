"""The workspace the built-in tools' tests work in: text files, a hidden file and directory, the
state directory and config file (denied), a binary file, and links in and out of it."""

from __future__ import annotations

import os
from pathlib import Path


def make_workspace(tmp_path: Path) -> Path:
    """The workspace ``tmp_path/ws`` (``tmp_path/outside.txt`` lies outside it)."""
    root = tmp_path / "ws"
    (root / "docs" / "deep").mkdir(parents=True)
    (root / "README.md").write_text("# Demo\nhello world\nlast line\n")
    (root / "docs" / "guide.md").write_text("intro\nTODO: write more\n")
    (root / "docs" / "deep" / "notes.txt").write_text("todo later\n")
    (root / "src.py").write_text("def f():\n    return 1  # TODO\n")
    (root / ".env").write_text("SECRET=1\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("TODO hidden\n")
    (root / ".kernos").mkdir()
    (root / ".kernos" / "kernos.db").write_bytes(b"SQLite format 3\x00")
    (root / "kernos.toml").write_text("# TODO config\n")
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (tmp_path / "outside.txt").write_text("TODO outside\n")
    os.symlink(tmp_path / "outside.txt", root / "link_out.txt")
    os.symlink(tmp_path, root / "linked_dir")
    os.symlink(root / "README.md", root / "link_in.md")
    return root
