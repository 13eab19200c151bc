"""Writing approved text (spec §4): atomic, permission-keeping, never half-written."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def with_trailing_newline(text: str) -> str:
    """``text`` ending in a newline: one is added when it lacks one, none otherwise."""
    return text if text.endswith("\n") else text + "\n"


def _default_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: Path, text: str, *, mode_from: Path | None = None) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) atomically; returns the file written.

    A temporary file in the same directory is written, fsynced and ``os.replace``d over the
    destination, so an interrupt or crash leaves either the old file or the new one. The
    destination keeps its permissions; a new file takes those of ``mode_from`` (the source).
    A symlink is followed: its target is rewritten and the link stays.

    Raises:
        OSError: the directory is not writable, the disk is full, ...
    """
    target = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = stat.S_IMODE(mode_from.stat().st_mode) if mode_from else _default_mode()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".kernos-tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
