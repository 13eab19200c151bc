"""The store's refusals, each with the fix for its case: a file that is not a kernos store, a
PostgreSQL server that cannot be used, a SQLite file or directory that cannot be opened."""

from __future__ import annotations

from pathlib import Path

from kernos.errors import StoreError
from kernos.runtime._store._dialect import PostgresDialect


def damaged(where: Path | str | None, exc: BaseException) -> StoreError:
    where = str(where) if where is not None else "the store"
    return StoreError(
        where,
        f"not a readable kernos store ({exc})",
        f"move it aside (mv {where} {where}.broken) and run again to start a fresh store",
    )


def unreachable(dialect: PostgresDialect, exc: BaseException) -> StoreError:
    return StoreError(
        dialect.where,
        f"cannot use this PostgreSQL store ({dialect.unreachable(exc)})",
        "start the server, or fix the URL in KERNOS_STORE_URL or [store] url in kernos.toml "
        "(host, port, user, password, database), or unset both to use the SQLite store",
    )


def unopenable(path: Path, exc: BaseException) -> StoreError:
    """Why the store's file or directory cannot be opened, with the fix for that case."""
    home = path.parent
    if home.exists() and not home.is_dir():
        return StoreError(
            home,
            "is a file, not a directory, so the store cannot live there",
            "move the file aside or set KERNOS_HOME to a directory",
        )
    for parent in home.parents:
        if parent.exists() and not parent.is_dir():
            return StoreError(
                home,
                f"cannot be created because {parent} is a file",
                "set KERNOS_HOME to a directory you can write",
            )
    if path.is_dir():
        return StoreError(
            path,
            "is a directory, not a database file",
            "move it aside and run again to start a fresh store",
        )
    reason = getattr(exc, "strerror", None) or str(exc)
    return StoreError(
        path,
        f"cannot be opened for writing ({reason})",
        f"make {home} and the file writable by you, or set KERNOS_HOME to a writable directory",
    )
