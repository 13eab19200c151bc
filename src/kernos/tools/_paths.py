"""Where the built-in tools may look: a model-supplied path becomes a real path in the workspace.

:class:`WorkspacePaths` is the small protocol these tools need; :class:`LocalWorkspace` implements
it on the runtime's one workspace rule (:func:`kernos.runtime.path_problem`, the rule every channel
attachment goes through too), adding what listing needs: directories, and whether a path found
while walking a root may be shown. :meth:`LocalWorkspace.from_policy` builds it from
``[workspace]`` (roots, ``allow_hidden``, the state directory and the config file).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

from kernos.errors import PathRefused as PathRefused
from kernos.runtime import WorkspacePolicy, path_problem, path_refusal

#: the default cap on a file a built-in tool reads (checked with ``stat`` before a byte is read)
MAX_FILE_BYTES = 10 * 1024 * 1024


#: what the runtime rule's answers mean to a model reading a tool's refusal
class WorkspacePaths(Protocol):
    """What the built-in tools need from the workspace policy."""

    @property
    def roots(self) -> Sequence[Path]:
        """The resolved directories model-supplied paths must stay inside; the first is the base."""
        ...

    @property
    def max_file_bytes(self) -> int:
        """The largest file a tool may read."""
        ...

    def resolve(self, path: str, *, directory: bool = False) -> Path:
        """The real file (or directory) ``path`` names inside a root.

        Raises:
            PathRefused: outside every root, hidden, the state directory or config file, missing.
        """
        ...

    def visible(self, path: Path) -> bool:
        """True when a path found while walking a root may be shown to the model."""
        ...

    def writable(self, path: str) -> Path:
        """The real file ``path`` names inside a root, for writing: it may not exist yet, but
        its place must pass the same checks (an existing symlink is followed).

        Raises:
            PathRefused: outside every root, hidden, the state directory or config file, or a
                directory.
        """
        ...

    def display(self, path: Path) -> str:
        """How the model sees a resolved path: relative to the base root when inside it."""
        ...


class LocalWorkspace:
    """The default policy: one or more roots (the working directory unless given).

    Refused even inside a root: any path component starting with ``.`` (``.env``, ``.git``,
    ``.kernos``), the state directory and the config file. Symlinks are followed and the target
    must pass the same checks.
    """

    def __init__(
        self,
        roots: Iterable[Path] | None = None,
        *,
        denied: Iterable[Path] = (),
        max_file_bytes: int = MAX_FILE_BYTES,
        allow_hidden: bool = False,
    ) -> None:
        self._roots = tuple(Path(r).resolve() for r in (roots or [Path.cwd()]))
        self._denied = tuple(Path(d).resolve() for d in denied)
        self._root_texts = tuple(str(r) for r in self._roots)
        self._denied_texts = tuple(str(d) for d in self._denied)
        self._max = max_file_bytes
        self._allow_hidden = allow_hidden

    @classmethod
    def from_policy(
        cls, policy: WorkspacePolicy, *, max_file_bytes: int = MAX_FILE_BYTES
    ) -> LocalWorkspace:
        """The built-in tools' view of the runtime's workspace policy: the same roots, denied
        paths and ``allow_hidden``."""
        return cls(
            policy.roots,
            denied=policy.denied,
            max_file_bytes=max_file_bytes,
            allow_hidden=policy.allow_hidden,
        )

    @property
    def roots(self) -> Sequence[Path]:
        return self._roots

    @property
    def max_file_bytes(self) -> int:
        return self._max

    def _roots_text(self) -> str:
        return ", ".join(str(r) for r in self._roots)

    def _problem(self, path: Path) -> str | None:
        """Why an absolute, normalized path may not be used (``None``: it may)."""
        problem = path_problem(
            str(path), self._root_texts, self._denied_texts, allow_hidden=self._allow_hidden
        )
        if problem is None:
            return None
        return path_refusal(problem, self._roots_text(), read=True)

    def resolve(self, path: str, *, directory: bool = False) -> Path:
        given = Path(os.path.expanduser(path)) if path.startswith("~") else Path(path)
        joined = given if given.is_absolute() else self._roots[0] / given
        # lexical check first: `.kernos/kernos.db` or `../x` is refused even if it does not exist
        problem = self._problem(Path(os.path.normpath(joined)))
        try:
            real = joined.resolve()
        except (OSError, RuntimeError):  # a symlink loop, an unreadable directory
            raise PathRefused(f"{path} cannot be resolved; name another path") from None
        if problem is None:
            problem = self._problem(real)
        if problem is not None:
            raise PathRefused(f"{path} {problem}; name a path inside the workspace")
        if directory:
            if not real.is_dir():
                raise PathRefused(
                    f"{path} is not a directory in the workspace; call list_files to see what "
                    "exists"
                )
        elif not real.is_file():
            what = "a directory, not a file" if real.is_dir() else "not an existing file"
            raise PathRefused(f"{path} is {what}; call list_files to see which files exist")
        return real

    def writable(self, path: str) -> Path:
        given = Path(os.path.expanduser(path)) if path.startswith("~") else Path(path)
        joined = given if given.is_absolute() else self._roots[0] / given
        problem = self._problem(Path(os.path.normpath(joined)))
        try:
            real = joined.resolve()  # the existing part's symlinks followed; the rest as named
        except (OSError, RuntimeError):
            raise PathRefused(f"{path} cannot be resolved; name another path") from None
        if problem is None:
            problem = self._problem(real)
        if problem is not None:
            refusal = problem.replace("may not read", "may not write")
            raise PathRefused(f"{path} {refusal}; name a path inside the workspace")
        if real.is_dir():
            raise PathRefused(f"{path} is a directory, not a file; name the file to write")
        if real.exists() and not real.is_file():
            raise PathRefused(f"{path} is not a regular file; name a text file to write")
        return real

    def visible(self, path: Path) -> bool:
        if self._problem(Path(os.path.normpath(path))) is not None:
            return False
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            return False
        return self._problem(real) is None

    def display(self, path: Path) -> str:
        base = self._roots[0]
        if path.is_relative_to(base):
            return path.relative_to(base).as_posix() or "."
        return path.as_posix()
