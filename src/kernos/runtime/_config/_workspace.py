"""The workspace policy: what a model-supplied path or URL may reach.

Every channel kind and every tool that takes a path from a model asks one :class:`WorkspacePolicy`;
none re-implements it. A path resolves, symlinks followed, to a real regular file inside one of the
roots, or it is refused with a sentence the model can act on (:class:`WorkspaceRefused`). Always
refused, even inside a root: the state directory, the config file, the kernel's pseudo-filesystems
(``/proc``, ``/sys``, ``/dev``) and — unless ``allow_hidden`` — any path with a component starting
with ``.``. Attachments are also size-capped, checked with ``stat`` before a byte is read.

The decision itself (:func:`path_problem`) is a pure function over already-resolved paths; the
methods around it do the few system calls (``realpath``, ``stat``, ``open``).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import unquote, urlsplit

from kernos.errors import NotRegularFile as NotRegularFile
from kernos.errors import WorkspaceRefused as WorkspaceRefused
from kernos.runtime._config._home import kernos_home, project_root
from kernos.runtime._errors import ConfigError

if TYPE_CHECKING:
    from kernos.runtime._config._config import Config

#: ``[workspace] max_attachment_bytes`` when not set: 25 MB.
DEFAULT_MAX_ATTACHMENT_BYTES = 25 * 1024 * 1024

#: Refused whatever the roots say: files there are not files (``/proc/self/environ`` stats as an
#: empty regular file and reads as every secret in the environment).
SYSTEM_DENIED = ("/proc", "/sys", "/dev")

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_URL_SCHEMES = ("http", "https")
_SHOWN = 200  # at most this many characters of a model-supplied path in a refusal


def _real(path: str | os.PathLike[str]) -> str:
    """``path`` with every symlink followed. ``os.path.realpath`` stops resolving at a symlink
    loop and returns the rest as written (``loop/../link_out`` comes back as ``ROOT/link_out``,
    itself a symlink that may lead anywhere): a result that still holds a symlink is refused
    here with ``ELOOP``, as the kernel refuses to open such a path."""
    real = os.path.realpath(os.fspath(path))
    probe = real
    while True:
        if os.path.islink(probe):
            raise OSError(errno.ELOOP, "a symlink on the way loops", os.fspath(path))
        parent = os.path.dirname(probe)
        if parent == probe:
            return real
        probe = parent


def _inside(path: str, parent: str) -> bool:
    """``path`` is ``parent`` or below it (both real, absolute, normalized)."""
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


def _hidden_parts(path: str, root: str) -> list[str]:
    relative = os.path.relpath(path, root)
    if relative == os.curdir:
        return []
    return [part for part in relative.split(os.sep) if part.startswith(".")]


#: what :func:`path_problem` found, as the refusal says it: ``(sent, read)``, the text for a
#: path a channel would send (:meth:`WorkspacePolicy.attachment`) and for one a built-in tool
#: would read (``kernos.tools``); ``{roots}`` is filled in with the workspace roots
PATH_REFUSALS: dict[str, tuple[str, str]] = {
    "outside": (
        "is outside the workspace (roots: {roots}); send a file inside it",
        "is outside the workspace (roots: {roots})",
    ),
    "system": (
        "is a system file (/proc, /sys, /dev), which is never sent; send a file",
        "is a system file (/proc, /sys, /dev), which tools may not read",
    ),
    "denied": (
        "is kernos's own state or configuration, which is never sent; send another file",
        "is kernos' own state or configuration, which tools may not read",
    ),
    "hidden": (
        "is a hidden path (a name starting with '.'), which is never sent; send another file",
        "is hidden (a path component starts with '.'), and hidden paths are not shown",
    ),
}


def path_refusal(problem: str, roots: str, *, read: bool = False) -> str:
    """The refusal text for a :func:`path_problem` answer; ``read``: a tool reading the path."""
    return PATH_REFUSALS[problem][read].format(roots=roots)


def path_problem(
    real: str, roots: tuple[str, ...], denied: tuple[str, ...], *, allow_hidden: bool
) -> str | None:
    """The pure rule over a resolved path: ``None`` when ``real`` may be used, else what is wrong
    (``outside``, ``system``, ``denied`` or ``hidden``). Existence and file type are checked
    afterwards, so nothing outside the workspace can be probed for existence.

    Args:
        real: the path after symlinks were followed (``os.path.realpath``).
        roots: the workspace roots, resolved the same way.
        denied: resolved paths refused even inside a root (the state directory, the config file).
        allow_hidden: admit components starting with ``.`` below a root.
    """
    containing = [root for root in roots if _inside(real, root)]
    if not containing:
        return "outside"
    if any(_inside(real, no) for no in SYSTEM_DENIED):
        return "system"
    if any(_inside(real, no) for no in denied):
        return "denied"
    if not allow_hidden and all(_hidden_parts(real, root) for root in containing):
        return "hidden"
    return None


@dataclass(frozen=True)
class WorkspacePolicy:
    """Where model-supplied paths may lead. See the module docstring for the rules.

    Args:
        roots: the workspace roots; relative model paths are read against the first one.
        denied: paths refused even inside a root (the state directory, the config file);
            :data:`SYSTEM_DENIED` is refused as well.
        allow_hidden: admit paths with a component starting with ``.``.
        max_attachment_bytes: the largest file :meth:`attachment` admits.

    Raises:
        ValueError: no root, or a cap below zero.
    """

    roots: tuple[Path, ...]
    denied: tuple[Path, ...] = ()
    allow_hidden: bool = False
    max_attachment_bytes: int = DEFAULT_MAX_ATTACHMENT_BYTES
    _roots: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _denied: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.roots:
            raise ValueError("a workspace needs at least one root")
        if self.max_attachment_bytes < 0:
            raise ValueError("max_attachment_bytes must be 0 or more")
        roots = tuple(dict.fromkeys(_real(Path(r).expanduser()) for r in self.roots))
        denied = tuple(dict.fromkeys(_real(Path(d).expanduser()) for d in self.denied))
        object.__setattr__(self, "roots", tuple(Path(r) for r in roots))
        object.__setattr__(self, "denied", tuple(Path(d) for d in denied))
        object.__setattr__(self, "_roots", roots)
        object.__setattr__(self, "_denied", denied)

    @classmethod
    def default(cls, cwd: Path | None = None) -> WorkspacePolicy:
        """The policy with no ``[workspace]`` table: the working directory is the root; its
        ``kernos.toml`` and the state directory are refused."""
        where = cwd or Path.cwd()
        denied = (kernos_home(where), where / "kernos.toml", project_root(where) / "kernos.toml")
        return cls((where,), tuple(dict.fromkeys(denied)))

    @classmethod
    def from_config(cls, config: Config) -> WorkspacePolicy:
        """The policy of ``[workspace]``: roots read against the config file's directory (else the
        working directory); the state directory and the config file refused.

        Raises:
            ConfigError: a root is not an existing directory.
        """
        settings = config.workspace
        return cls.of_project(
            config.base_dir,
            config.home,
            config.path,
            settings.roots,
            allow_hidden=settings.allow_hidden,
            max_attachment_bytes=settings.max_attachment_bytes,
        )

    @classmethod
    def of_project(
        cls,
        base_dir: Path,
        home: Path,
        file: Path | None,
        roots: Sequence[str] = (".",),
        *,
        allow_hidden: bool = False,
        max_attachment_bytes: int = DEFAULT_MAX_ATTACHMENT_BYTES,
    ) -> WorkspacePolicy:
        """The policy of a project whose config file is ``file`` (None: there is none) in
        ``base_dir``; the defaults are those of an absent ``[workspace]`` table (what
        ``kernos channels`` builds without the config models).

        Raises:
            ConfigError: a root is not an existing directory.
        """
        found: list[Path] = []
        for number, raw in enumerate(roots, 1):
            root = Path(raw).expanduser()
            root = root if root.is_absolute() else base_dir / root
            if not root.is_dir():
                raise ConfigError(
                    file,
                    "workspace.roots",
                    f"entry {number} ({raw!r}) is not an existing directory",
                    "name a directory that exists, or remove it",
                )
            found.append(root)
        denied = [home, base_dir / "kernos.toml"]
        if file is not None:
            denied.append(file)
        return cls(tuple(found), tuple(denied), allow_hidden, max_attachment_bytes)

    # -- paths -----------------------------------------------------------------------------
    def _refused(self, what: str, shown: str, problem: str) -> WorkspaceRefused:
        return WorkspaceRefused(f"{what} refused: {_show(shown)} {problem}")

    def _where(self) -> str:
        return ", ".join(self._roots)

    def resolve(self, path: str | os.PathLike[str], *, what: str = "path") -> Path:
        """A model-supplied path (or ``file://`` URI) as the real regular file it names.

        Args:
            path: absolute, relative to the first root, ``~``-prefixed, or a ``file://`` URI.
            what: the word the refusal starts with (``attachment refused: ...``).

        Raises:
            WorkspaceRefused: outside every root, into the state directory or the config file,
                hidden, missing, unreadable or not a regular file.
        """
        shown = os.fspath(path).strip()
        real = self._candidate(shown, what)
        problem = path_problem(real, self._roots, self._denied, allow_hidden=self.allow_hidden)
        if problem is not None:
            raise self._refused(what, shown, path_refusal(problem, self._where()))
        try:
            info = os.stat(real)
        except FileNotFoundError:
            raise self._refused(
                what, shown, "does not exist; send the path of an existing file in the workspace"
            ) from None
        except OSError as exc:
            raise self._refused(what, shown, f"cannot be read ({exc.strerror or exc})") from None
        if not stat.S_ISREG(info.st_mode):
            raise self._refused(
                what, shown, "is not a regular file (a directory, device or pipe); send a file"
            )
        return Path(real)

    def _candidate(self, shown: str, what: str) -> str:
        """The model's text as an absolute real path (not yet checked)."""
        if not shown:
            raise WorkspaceRefused(f"{what} refused: the path is empty; send the path of a file")
        text = shown
        scheme = _SCHEME.match(text)
        if scheme is not None:
            if scheme.group(1).lower() != "file":
                raise self._refused(
                    what, shown, "is a URL, not a path; send the path of a file in the workspace"
                )
            parts = urlsplit(text)
            if parts.netloc not in ("", "localhost"):
                raise self._refused(
                    what, shown, "names another host; send the path of a file in the workspace"
                )
            text = unquote(parts.path)
            if not text:
                raise self._refused(what, shown, "names no file; send the path of a file")
        if "\x00" in text:
            raise self._refused(what, shown, "is not a valid path; send the path of a file")
        try:
            expanded = Path(text).expanduser()
        except RuntimeError:  # ~user with no such user
            expanded = Path(text)
        candidate = expanded if expanded.is_absolute() else Path(self._roots[0]) / expanded
        try:
            return _real(candidate)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise self._refused(
                    what, shown, "is not a valid path; send the path of a file"
                ) from None
            raise self._refused(
                what, shown, "leads through a symlink loop; send the path of a file"
            ) from None
        except ValueError:
            raise self._refused(
                what, shown, "is not a valid path; send the path of a file"
            ) from None

    # -- attachments -----------------------------------------------------------------------
    def attachment(self, path: str | os.PathLike[str]) -> Path:
        """:meth:`resolve`, then the size cap, checked with ``stat`` (nothing is read).

        Raises:
            WorkspaceRefused: see :meth:`resolve`; or the file is over ``max_attachment_bytes``.
        """
        real = self.resolve(path, what="attachment")
        self._check_size(os.fspath(path).strip(), real.stat().st_size)
        return real

    def _check_size(self, shown: str, size: int) -> None:
        if size > self.max_attachment_bytes:
            raise self._refused(
                "attachment",
                shown,
                f"is {_megabytes(size)}, over the {_megabytes(self.max_attachment_bytes)} limit "
                "for attachments; send a smaller file",
            )

    def read_attachment(self, path: str | os.PathLike[str]) -> tuple[Path, bytes]:
        """The attachment's real path and bytes: checked first, then opened without following a
        symlink swapped in meanwhile (:func:`open_regular`), re-checked on the open file (a
        regular file whose own real path the policy allows), and read up to the cap only.

        Raises:
            WorkspaceRefused: see :meth:`attachment`; or the file changed or cannot be read.
        """
        shown = os.fspath(path).strip()
        real = self.attachment(path)
        try:
            handle, opened = open_regular(real)
        except NotRegularFile:
            raise self._refused("attachment", shown, "changed while it was being read") from None
        except OSError as exc:
            raise self._refused(
                "attachment", shown, f"cannot be read ({exc.strerror or exc})"
            ) from None
        with handle:
            if path_problem(opened, self._roots, self._denied, allow_hidden=self.allow_hidden):
                raise self._refused("attachment", shown, "changed while it was being read")
            self._check_size(shown, os.fstat(handle.fileno()).st_size)
            data = handle.read(self.max_attachment_bytes + 1)
        self._check_size(shown, len(data))
        return real, data

    def attachment_source(
        self,
        payload: str,
        *,
        allow_urls: bool = False,
        data_schemes: tuple[str, ...] = (),
    ) -> Path | str:
        """What a media payload may be: a checked local file (a path or ``file://``), an
        ``http(s)://`` URL only when the channel opts in (kernos never fetches one otherwise),
        or data in one of the channel's ``data_schemes`` (``base64://`` for OneBot), unchanged.

        Returns:
            the real :class:`~pathlib.Path` of a local file, or the URL / data text as given.

        Raises:
            WorkspaceRefused: a refused path, a URL the channel does not take, another scheme.
        """
        where = payload.strip()
        scheme = _SCHEME.match(where)
        name = scheme.group(1).lower() if scheme is not None else "file"
        if name == "file":
            return self.attachment(where)
        if name in data_schemes:
            return where
        if name in _URL_SCHEMES:
            if allow_urls:
                return where
            raise self._refused(
                "attachment",
                where,
                "is a URL and this channel does not take URL attachments (kernos fetches no URL "
                "a model names); send the path of a file in the workspace",
            )
        raise self._refused(
            "attachment",
            where,
            f"uses the {name}:// scheme, which this channel does not take; send the path of a "
            "file in the workspace",
        )


_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def open_regular(path: str | os.PathLike[str]) -> tuple[BinaryIO, str]:
    """Open a checked path for reading, then check what was opened: the other half of
    :meth:`WorkspacePolicy.resolve` (between a check and an ``open`` the path may change).

    The last component is not followed if it became a symlink (``O_NOFOLLOW``: ``ELOOP``), a pipe
    swapped in does not block (``O_NONBLOCK``), and the open file must be a regular file. The path
    returned is the open file's own real path (``/proc/self/fd``; elsewhere the path's real path,
    accepted only when it is the same file), which the caller checks against its policy again:
    that catches a directory above it swapped for a symlink.

    Returns:
        the open file (blocking reads of a regular file) and its real path.

    Raises:
        NotRegularFile: not a regular file, or not the file the path now names.
        OSError: it cannot be opened (``ELOOP``: the last component is a symlink).
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(f"{os.fspath(path)} is not a regular file")
        opened = _real_of_fd(fd, os.fspath(path), info)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return handle, opened


def _real_of_fd(fd: int, path: str, info: os.stat_result) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    real = _real(path)
    now = os.stat(real)
    if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
        raise NotRegularFile(f"{path} changed while it was being opened")
    return real


def _show(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"
