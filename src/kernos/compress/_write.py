"""Writing approved text: atomic, permission- and owner-keeping, never half-written.

Temporary files are named ``.NAME.PID.RANDOM.kernos-tmp`` next to the destination. A crash
(SIGKILL) mid-write can leave one behind; :func:`remove_stale_temp_files` deletes those on a later
run by a rule that never touches a file a live writer may still rename: only names of exactly this
shape, and only when the writer's PID is not running or the file is over an hour old.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

TEMP_SUFFIX = ".kernos-tmp"
STALE_AFTER = 3600.0
"""Seconds after which a temporary file is stale whatever its PID (a PID can be reused)."""

_OWN_TEMP = re.compile(r"^\..+\.(\d+)\.[A-Za-z0-9_]+" + re.escape(TEMP_SUFFIX) + "$")
_OLD_TEMP = re.compile(r"^\..+\.[A-Za-z0-9_]{8}" + re.escape(TEMP_SUFFIX) + "$")  # no PID


def is_temp_file(path: Path | str) -> bool:
    """A kernos temporary file (``.NAME.….kernos-tmp``): never a compress target."""
    name = Path(path).name
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def is_stale_temp_file(path: Path, *, now: float | None = None) -> bool:
    """Whether ``path`` is a temporary file kernos left and no writer can still be using.

    Rule: the name has kernos's own shape, and either its writer PID is not running, or (PID
    reused, or an older kernos that put no PID in the name) it is over :data:`STALE_AFTER` old.
    """
    name = path.name
    own = _OWN_TEMP.match(name)
    if own is None and _OLD_TEMP.match(name) is None:
        return False
    try:
        info = path.lstat()
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode):
        return False
    if own is not None and int(own.group(1)) != os.getpid() and not _pid_alive(int(own.group(1))):
        return True
    return (now if now is not None else time.time()) - info.st_mtime > STALE_AFTER


def remove_stale_temp_files(directories: Iterable[Path]) -> list[Path]:
    """Delete the stale kernos temporary files in ``directories`` (not recursive); returns them."""
    removed: list[Path] = []
    now = time.time()
    for directory in sorted({Path(os.path.realpath(d)) for d in directories}):
        try:
            entries = list(directory.iterdir())
        except OSError:
            continue
        for entry in sorted(entries):
            if is_stale_temp_file(entry, now=now):
                with contextlib.suppress(OSError):
                    entry.unlink()
                    removed.append(entry)
    return removed


def is_read_only(path: Path) -> bool:
    """A file nobody may write (no ``w`` bit at all), or that this user may not write."""
    try:
        mode = Path(os.path.realpath(path)).stat().st_mode
    except FileNotFoundError:
        return False
    return stat.S_IMODE(mode) & 0o222 == 0 or not os.access(path, os.W_OK)


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
    owner: tuple[int, int] | None = None
    try:
        info = target.stat()
        mode, owner = stat.S_IMODE(info.st_mode), (info.st_uid, info.st_gid)
    except FileNotFoundError:
        mode = stat.S_IMODE(mode_from.stat().st_mode) if mode_from else _default_mode()
    fd, tmp = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.{os.getpid()}.", suffix=TEMP_SUFFIX
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        if owner is not None and owner != (os.geteuid(), os.getegid()):
            with contextlib.suppress(PermissionError):  # only root may give a file away
                os.chown(tmp, *owner)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
