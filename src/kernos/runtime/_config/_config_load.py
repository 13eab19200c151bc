"""Loading ``kernos.toml`` and the agent files (``.kernos/agents/*.md``, ``.claude/agents/*.md``)
into :class:`kernos.runtime._config._config.Config`: ``${ENV}`` expansion, validation and the
problems found, each a :class:`ConfigError` naming the file, the key and the fix."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kernos.runtime._config._claude import CLAUDE_CODE_MODELS, map_claude_tools
from kernos.runtime._config._config import Config, _check_function_names
from kernos.runtime._config._config_tables import AgentConfig, _resolve_store_url
from kernos.runtime._config._home import (
    _read_text,
    check_depth,
    config_file,
    expand_env,
    kernos_home,
    project_root,
    register_config_urls,
    substitute_env,
    too_deep,
)
from kernos.runtime._errors import ConfigError
from kernos.runtime._rules._approval_state import WAIT_FIX
from kernos.runtime._rules._budget import (
    COUNT_FIX,
    DURATION_FIX,
)


def _strip_env(value: Any) -> Any:
    if isinstance(value, str):
        return substitute_env(value, lambda name: "")
    if isinstance(value, dict):
        return {k: _strip_env(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_env(v) for v in value]
    return value


def _expand_env_lazily(
    data: dict[str, Any], file: Path | None, problems: list[ConfigError]
) -> tuple[dict[str, Any], dict[str, ConfigError]]:
    """Expand ``${ENV}`` everywhere; a ``[models.NAME]`` table whose variable is unset is kept
    with the reference blanked and its error returned (the first, with the others in
    ``others``), so only a command using that model fails. An unset variable outside
    ``[models.*]`` is appended to ``problems`` and expands to ``""``."""
    models = data.get("models")
    rest = expand_env({k: v for k, v in data.items() if k != "models"}, file, "", problems)
    if not isinstance(models, dict):
        return ({**rest, "models": models} if "models" in data else rest), {}
    deferred: dict[str, ConfigError] = {}
    expanded: dict[str, Any] = {}
    for alias, table in models.items():
        unset: list[ConfigError] = []
        expanded[alias] = expand_env(table, file, f"models.{alias}", unset)
        if unset:
            unset[0].others = unset[1:]
            deferred[alias] = unset[0]
    return {**rest, "models": expanded}, deferred


_HIDDEN_FIELDS = frozenset(
    {"path", "base_dir", "home", "store_url", "alias_problems", "unset_keys", "source"}
)


def _known_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys the table at ``loc`` (a pydantic error location, its last part the key) takes."""
    import typing

    parts = list(loc[:-1])
    while parts:
        field = model.model_fields.get(str(parts.pop(0)))
        if field is None:
            return []
        target: Any = field.annotation
        if typing.get_origin(target) is dict:
            target = typing.get_args(target)[1]
            if not parts:
                return []
            parts.pop(0)  # the table's own name: [agents.NAME]
        if not (isinstance(target, type) and issubclass(target, BaseModel)):
            return []
        model = target
    return [name for name in model.model_fields if name not in _HIDDEN_FIELDS]


def unknown_key_fix(key: str, known: list[str]) -> str:
    """What to write instead of the unknown ``key``: the nearest of ``known``, else remove it.
    Pure."""
    import difflib

    near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if near:
        return f"did you mean {near[0]!r}? (or remove it)"
    return "remove it or check its spelling in the docs"


def _validation_problem(
    file: Path | None, prefix: str, issue: Any, model: type[BaseModel]
) -> ConfigError:
    key = ".".join(str(p) for p in (prefix, *issue["loc"]) if p != "")
    if issue["type"] == "extra_forbidden":
        known = _known_keys(model, tuple(issue["loc"]))
        return ConfigError(file, key, "unknown key", unknown_key_fix(str(issue["loc"][-1]), known))
    if issue["type"] == "missing":
        return ConfigError(file, key, "required key is missing", "add it")
    if issue["type"] == "duration":
        return ConfigError(file, key, issue["msg"], DURATION_FIX)
    if issue["type"] == "count":
        return ConfigError(file, key, issue["msg"], COUNT_FIX)
    if issue["type"] == "wait_duration":  # [permissions] wait: 0 is "never wait", not "no limit"
        return ConfigError(file, key, issue["msg"], WAIT_FIX)
    return ConfigError(file, key, issue["msg"], "correct the value")


_M = TypeVar("_M", bound=BaseModel)


def _drop(data: dict[str, Any], loc: tuple[Any, ...], depth: int) -> None:
    """Remove what ``loc`` points at (at most ``depth`` parts deep; a list item takes its list)."""
    path: list[Any] = []
    for part in loc[:depth]:
        if not isinstance(part, str):
            break
        path.append(part)
    node: Any = data
    for part in path[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and path:
        if path[-1] in node:
            del node[path[-1]]
        elif len(path) > 1:  # a missing key: drop the table that lacks it
            _drop(data, tuple(path[:-1]), depth)


def _validate(
    model: type[_M],
    data: dict[str, Any],
    file: Path | None,
    prefix: str,
    problems: list[ConfigError],
) -> _M:
    """``data`` as ``model``; each problem is appended to ``problems`` and its value dropped, so
    the rest is still validated (and checked further) in the same pass."""
    data = copy.deepcopy(data)
    dropped: set[tuple[Any, ...]] = set()
    for depth in (99, 99, 2, 1):
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            issues = exc.errors(include_url=False)
            # a required key whose bad value was dropped is not missing too: said once
            said = [i for i in issues if i["type"] != "missing" or tuple(i["loc"]) not in dropped]
            new = [_validation_problem(file, prefix, i, model) for i in said]
            problems.extend(p for p in new if all(str(p) != str(q) for q in problems))
            for issue in issues:
                dropped.add(tuple(issue["loc"]))
                _drop(data, tuple(issue["loc"]), depth)
    return model.model_validate({})


def _raise_first(problems: list[ConfigError]) -> None:
    if problems:
        first = problems[0]
        first.others = problems[1:]
        raise first


def parse_agent_file(path: Path) -> AgentConfig:
    """Read ``.kernos/agents/NAME.md``: a ``---`` front-matter block, then the instructions.

    Raises:
        ConfigError: the first problem of the file, the others in ``others``.
    """
    problems: list[ConfigError] = []
    agent = _parse_agent_file(path, problems)
    _raise_first(problems)
    assert agent is not None
    return agent


def _parse_agent_file(path: Path, problems: list[ConfigError]) -> AgentConfig | None:
    """The agent file's definition, its problems appended to ``problems`` (None: unreadable)."""
    try:
        text = _read_text(path)
    except ConfigError as exc:
        problems.append(exc)
        return None
    meta: dict[str, Any] = {}
    body = text
    if text.startswith("---"):
        parts = text.split("\n---", 1)
        if len(parts) != 2:
            problems.append(
                ConfigError(
                    path, "front matter", "the --- block is not closed", "end it with a line '---'"
                )
            )
            return None
        head = parts[0][3:]
        body = parts[1].split("\n", 1)[1] if "\n" in parts[1] else ""
        import yaml  # only front matter needs it; a command that never reads agents skips it

        try:
            loaded = check_depth(yaml.safe_load(head) or {}, path, "front matter")
        except yaml.YAMLError as exc:
            problems.append(
                ConfigError(path, "front matter", f"not valid YAML ({exc})", "fix the --- block")
            )
            return None
        except RecursionError:  # PyYAML composes recursively, one level per bracket
            problems.append(too_deep(path, "front matter"))
            return None
        except ConfigError as exc:
            problems.append(exc)
            return None
        if not isinstance(loaded, dict):
            problems.append(
                ConfigError(path, "front matter", "not a mapping", "use 'key: value' lines")
            )
            return None
        meta = loaded
    meta.pop("name", None)
    if isinstance(meta.get("tools"), str):
        meta["tools"] = [t.strip() for t in meta["tools"].split(",") if t.strip()]
    if isinstance(meta.get("tools"), list) and all(isinstance(t, str) for t in meta["tools"]):
        meta["tools"] = map_claude_tools(meta["tools"])  # the convention of agent files
    meta["instructions"] = body.strip()
    agent = _validate(AgentConfig, meta, path, "", problems)
    agent.source = str(path)
    return agent


def agent_model_problem(config: Config, name: str) -> ConfigError | None:
    """Why agent ``name``'s own ``model`` cannot be used, or None: a Claude Code model name
    (``sonnet``, ``inherit``) that no ``[models.NAME]`` defines. Asked only when the agent's model
    is the one chosen (``--model`` wins without it). Pure."""
    agent = config.agents.get(name)
    model = ((agent.model if agent else None) or "").strip()
    if model in config.models or model.casefold() not in {*CLAUDE_CODE_MODELS, "inherit"}:
        return None
    where = (agent.source if agent else None) or config.path
    if model.casefold() == "inherit":
        return ConfigError(
            where,
            f"agents.{name}.model",
            "'inherit' is a Claude Code model name",
            "remove the model line: a kernos agent without one runs on the default model",
        )
    return ConfigError(
        where,
        f"agents.{name}.model",
        f"{model!r} is a Claude Code model name and no [models.{model}] defines it",
        f"define [models.{model}] with the model it stands for, or write a provider:model "
        f"string such as {CLAUDE_CODE_MODELS[model.casefold()]}",
    )


def _load_agent_files(config: Config, file: Path, cwd: Path, problems: list[ConfigError]) -> None:
    """Add the agent files to ``config.agents``: ``.kernos/agents/*.md`` (one named like an
    ``[agents.NAME]`` is a problem), then Claude Code's ``.claude/agents/*.md`` in the project
    root, whose agents a kernos definition of the same name replaces (that directory is another
    tool's, so shadowing one of its agents is how a project adapts it to kernos)."""
    agents_dir = config.home / "agents"
    if agents_dir.is_dir():
        for md in sorted(agents_dir.glob("*.md")):
            name = md.stem
            if name in config.agents:
                problems.append(
                    ConfigError(
                        md,
                        f"agents.{name}",
                        f"agent {name!r} is also defined in {file.name}",
                        "keep one definition",
                    )
                )
                continue
            agent = _parse_agent_file(md, problems)
            if agent is not None:
                config.agents[name] = agent
    claude_dir = project_root(cwd) / ".claude" / "agents"
    if claude_dir.is_dir():
        for md in sorted(claude_dir.glob("*.md")):
            if md.stem in config.agents:
                continue
            agent = _parse_agent_file(md, problems)
            if agent is not None:
                config.agents[md.stem] = agent


def load_config(path: Path | str | None = None, *, cwd: Path | None = None) -> Config:
    """Load ``kernos.toml`` (``path``, else the project root's — see :func:`project_root`;
    absent → defaults).

    Raises:
        ConfigError: unreadable TOML, an unknown key, a bad value or a missing ``${ENV}``: the
            first problem, every other one of the same pass in its ``others``.
    """
    config, problems = load_config_problems(path, cwd=cwd)
    _raise_first(problems)
    return config


def load_config_problems(
    path: Path | str | None = None, *, cwd: Path | None = None
) -> tuple[Config, list[ConfigError]]:
    """Load ``kernos.toml`` and the agent files as :func:`load_config` does, but collect every
    problem instead of raising the first: a bad value is dropped (its default applies) and the
    rest is still read, so one pass finds them all (``kernos config check``).

    Returns:
        the configuration made of what is valid, and the problems in file order (none: valid).
    """
    problems: list[ConfigError] = []
    cwd = cwd or Path.cwd()
    try:
        file, data = config_file(path, cwd=cwd)
    except ConfigError as exc:  # nothing of this file can be read; the agent files still can
        problems.append(exc)
        file, data = Path(path) if path is not None else project_root(cwd) / "kernos.toml", {}
    data, alias_problems = _expand_env_lazily(data, file, problems)
    unset = frozenset(
        [p.key for p in problems if p.file == str(file)]
        + [q.key for p in alias_problems.values() for q in (p, *p.others)]
    )
    register_config_urls(data)
    invalid: list[ConfigError] = []
    config = _validate(Config, data, file, "", invalid)
    problems += [p for p in invalid if p.key not in unset]  # "" for an unset ${ENV}: said once
    config.unset_keys = unset
    config.path = file if file.exists() else None
    _check_function_names(config, file, problems)
    config.alias_problems = alias_problems
    config.base_dir = file.parent.absolute()
    config.home = kernos_home(cwd)
    try:
        config.store_url = _resolve_store_url(config.store.url, config.path)
    except ConfigError as exc:
        problems.append(exc)
    _load_agent_files(config, file, cwd, problems)
    for name, agent in config.agents.items():
        if agent.model is not None and not agent.model.strip():
            where = agent.source or file
            problems.append(
                ConfigError(where, f"agents.{name}.model", "is blank", "remove it or name a model")
            )
            agent.model = None
    return config, problems
