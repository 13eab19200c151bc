"""Where a project's state and config are: the project root, the kernos home, the config file.

Light on purpose (no pydantic): the commands that only read the store (``kernos tasks``) find
it, and check that ``kernos.toml`` is readable, without building the config models; ``kernos
channels`` expands the ``${ENV}`` references of its tables with the same rule as the whole config.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kernos.runtime._errors import ConfigError
from kernos.runtime._secrets import (
    register_secrets,
    register_url_secrets,
    secret_env_name,
    secret_field,
)


def project_root(cwd: Path | None = None) -> Path:
    """The project a command works in: the nearest of the working directory and its parents that
    holds a ``.kernos`` or a ``kernos.toml`` (found like ``.git``), else the working directory.

    The state directory (unless ``KERNOS_HOME`` is set) and the default ``kernos.toml`` are both
    read from there, so a subdirectory of a project sees the project's tasks and config.
    """
    start = (cwd or Path.cwd()).absolute()
    for where in (start, *start.parents):
        if (where / ".kernos").exists() or (where / "kernos.toml").is_file():
            return where
    return start


def kernos_home(cwd: Path | None = None) -> Path:
    """Where state lives: ``$KERNOS_HOME``, else ``.kernos`` in the project root (the nearest
    directory up from the working directory that has one or a ``kernos.toml``; else the working
    directory, where it is created)."""
    env = os.environ.get("KERNOS_HOME")
    if env:
        return Path(env).expanduser().resolve()
    return (project_root(cwd) / ".kernos").resolve()


def _read_text(path: Path) -> str:
    """A config file's text; unreadable or non-UTF-8 is a :class:`ConfigError` saying so."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            path,
            "(file)",
            f"is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})",
            "save it as UTF-8",
        ) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(path, "(file)", f"cannot be read ({reason})", "check the path") from None


_T = TypeVar("_T")

MAX_CONFIG_DEPTH = 64
"""How deeply lists and tables may nest in ``kernos.toml`` or an agent file's front matter: far
beyond any real config, and well inside what the parsers (recursive) survive."""


def too_deep(file: Path | str, key: str) -> ConfigError:
    """The error for a config text nested deeper than :data:`MAX_CONFIG_DEPTH`."""
    return ConfigError(
        file,
        key,
        f"lists or tables nest more than {MAX_CONFIG_DEPTH} levels deep",
        "flatten the nesting",
    )


def check_depth(data: _T, file: Path | str, key: str) -> _T:
    """``data`` (parsed config), or :func:`too_deep` raised when it nests past the limit.

    Iterative (dotted keys nest without brackets, and the parsers need not recurse for them).
    :func:`kernos.boundary.nesting_depth` measures the same, but ``kernos tasks`` reads the
    config without loading the boundary (tests/test_startup.py).
    """
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > MAX_CONFIG_DEPTH:
            raise too_deep(file, key)
        stack.extend((child, depth + 1) for child in children)
    return data


def load_toml(file: Path) -> dict[str, Any]:
    """The TOML data of ``file``, checked for depth; nothing is validated yet.

    Raises:
        ConfigError: unreadable or non-UTF-8 text, invalid TOML, nesting past
            :data:`MAX_CONFIG_DEPTH` (tomllib recurses once per level: a 3,000-deep array would
            otherwise end every command in a ``RecursionError``).
    """
    try:
        data = tomllib.loads(_read_text(file))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(file, "(syntax)", f"not valid TOML ({exc})", "fix the syntax") from None
    except RecursionError:
        raise too_deep(file, "(syntax)") from None
    return check_depth(data, file, "(syntax)")


def config_file(
    path: Path | str | None = None, *, cwd: Path | None = None
) -> tuple[Path, dict[str, Any]]:
    """The config file (``path``, else the project root's ``kernos.toml``) and its TOML data
    (``{}`` when the default file does not exist); nothing is validated yet.

    Raises:
        ConfigError: an explicit ``path`` that does not exist, or see :func:`load_toml`.
    """
    file = Path(path) if path is not None else project_root(cwd) / "kernos.toml"
    if not file.exists():
        if path is not None:
            raise ConfigError(file, "(file)", "does not exist", "pass an existing file to --config")
        return file, {}
    return file, load_toml(file)


#: ``${NAME}``, or ``$${NAME}`` (group 1 set): the literal text ``${NAME}``, not expanded
_ENV_REF = re.compile(r"(\$?)\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def substitute_env(text: str, value_of: Callable[[str], str]) -> str:
    """``text`` with each ``${NAME}`` replaced by ``value_of(NAME)`` and each ``$${NAME}`` by the
    literal ``${NAME}``. Pure."""

    def one(match: re.Match[str]) -> str:
        return match.group(0)[1:] if match.group(1) else value_of(match.group(2))

    return _ENV_REF.sub(one, text)


def expand_env(
    value: Any, file: Path | None, key: str, missing: list[ConfigError] | None = None
) -> Any:
    """``value`` with its ``${ENV}`` references expanded (``$${X}`` is the literal ``${X}``).

    With ``missing``, an unset variable is appended there as its error and expands to ``""``, so
    every unset reference is found in one pass (``kernos config check``).

    An expanded value is a secret the scrubber learns when it comes from a secret place: a
    field that holds a credential (:func:`secret_field`) or a variable named like one
    (:func:`secret_env_name`). ``${DEPLOY_ENV}`` in ``instructions`` stays readable.

    Raises:
        ConfigError: a referenced variable is not set.
    """
    if isinstance(value, str):
        secret = secret_field(key)

        def lookup(name: str) -> str:
            found = os.environ.get(name)
            if found is None:
                problem = ConfigError(
                    file,
                    key,
                    f"environment variable {name} is not set",
                    f"export {name}=... or remove the ${{{name}}} reference",
                )
                if missing is None:
                    raise problem
                missing.append(problem)
                return ""
            if secret or secret_env_name(name):
                register_secrets(found)
            return found

        return substitute_env(value, lookup)
    if isinstance(value, dict):
        return {
            k: expand_env(v, file, f"{key}.{k}" if key else k, missing) for k, v in value.items()
        }
    if isinstance(value, list):
        return [expand_env(v, file, f"{key}[{i}]", missing) for i, v in enumerate(value)]
    return value


_URL_KEYS = ("url", "urls", "base_url")


def register_config_urls(data: Any) -> None:
    """Register the path/query tokens of every configured URL (``url``, ``urls``, ``base_url``
    in ``[channels.*]`` and ``[models.*]``) with the scrubber."""
    if not isinstance(data, dict):
        return
    for section in ("channels", "models"):
        tables = data.get(section)
        if not isinstance(tables, dict):
            continue
        for table in tables.values():
            if not isinstance(table, dict):
                continue
            for key in _URL_KEYS:
                value = table.get(key)
                values = value if isinstance(value, list) else [value]
                register_url_secrets(*(v for v in values if isinstance(v, str)))
