"""``kernos.toml`` and ``.kernos/agents/*.md`` loaded into pydantic models.

A config error is a developer mistake (STYLE.md §8): :class:`ConfigError` names the file, the key
and the fix, and the CLI turns it into exit 2.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ConfigError(Exception):
    """The configuration is wrong: ``file``, ``key`` and ``fix`` say where and what to do."""

    def __init__(self, file: str | Path | None, key: str, problem: str, fix: str) -> None:
        self.file = str(file) if file is not None else "(config)"
        self.key = key
        self.problem = problem
        self.fix = fix
        super().__init__(f"{self.file}: {key}: {problem}; {fix}")


class NoModelError(ConfigError):
    """No model was named anywhere."""

    def __init__(self) -> None:
        super().__init__(None, "default_model", "no model configured", "see below")
        self.args = (NO_MODEL_MESSAGE,)

    def __str__(self) -> str:
        return NO_MODEL_MESSAGE


NO_MODEL_MESSAGE = (
    "no model configured: pass --model, set KERNOS_MODEL, or set default_model in kernos.toml"
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelAlias(_Strict):
    """``[models.NAME]``: a named model with its own endpoint."""

    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    concurrency: int | None = Field(default=None, ge=0)


class AgentConfig(_Strict):
    """``[agents.NAME]`` or ``.kernos/agents/NAME.md``."""

    description: str = ""
    instructions: str = ""
    model: str | None = None
    tools: list[str] = Field(default_factory=list)
    allowed_outputs: list[str] = Field(default_factory=list)
    source: str | None = Field(default=None, exclude=True)


class CategoryConfig(_Strict):
    """``[categories.NAME]``: a generic worker on the category's model."""

    description: str = ""
    model: str | None = None
    instructions: str = ""


class TasksConfig(_Strict):
    """``[tasks]``: sub-agent limits."""

    max_depth: int = Field(default=1, ge=0)
    concurrency: int = Field(default=5, ge=0)


class OutputConfig(_Strict):
    """``[output]``: limits for ``output_send__*`` calls."""

    max_items: int = Field(default=20, ge=1)


class Config(_Strict):
    """The whole ``kernos.toml``."""

    default_model: str | None = None
    retries: int = Field(default=3, ge=0)
    models: dict[str, ModelAlias] = Field(default_factory=dict)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    categories: dict[str, CategoryConfig] = Field(default_factory=dict)
    channels: dict[str, dict[str, Any]] = Field(default_factory=dict)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    path: Path | None = Field(default=None, exclude=True)
    home: Path = Field(default=Path(".kernos"), exclude=True)

    def agent(self, name: str) -> AgentConfig:
        """The agent called ``name``; ``main`` exists even when not configured."""
        if name in self.agents:
            return self.agents[name]
        if name == "main":
            return AgentConfig()
        known = ", ".join(sorted(self.agents)) or "(none configured)"
        raise ConfigError(
            self.path,
            f"agents.{name}",
            f"no agent named {name!r}",
            f"define [agents.{name}] or .kernos/agents/{name}.md; known agents: {known}",
        )


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand_env(value: Any, file: Path | None, key: str) -> Any:
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            found = os.environ.get(name)
            if found is None:
                raise ConfigError(
                    file,
                    key,
                    f"environment variable {name} is not set",
                    f"export {name}=... or remove the ${{{name}}} reference",
                )
            return found

        return _ENV_REF.sub(replace, value)
    if isinstance(value, dict):
        return {k: _expand_env(v, file, f"{key}.{k}" if key else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, file, f"{key}[{i}]") for i, v in enumerate(value)]
    return value


def kernos_home(cwd: Path | None = None) -> Path:
    """Where state lives: ``$KERNOS_HOME``, else ``.kernos`` in the working directory."""
    env = os.environ.get("KERNOS_HOME")
    if env:
        return Path(env).expanduser().resolve()
    return ((cwd or Path.cwd()) / ".kernos").resolve()


def _raise_validation(file: Path | None, prefix: str, error: ValidationError) -> None:
    issue = error.errors(include_url=False)[0]
    key = ".".join(str(p) for p in (prefix, *issue["loc"]) if p != "")
    if issue["type"] == "extra_forbidden":
        raise ConfigError(file, key, "unknown key", "remove it or check its spelling in the docs")
    if issue["type"] == "missing":
        raise ConfigError(file, key, "required key is missing", "add it")
    raise ConfigError(file, key, issue["msg"], "correct the value")


def parse_agent_file(path: Path) -> AgentConfig:
    """Read ``.kernos/agents/NAME.md``: a ``---`` front-matter block, then the instructions."""
    text = path.read_text(encoding="utf-8")
    meta: dict[str, Any] = {}
    body = text
    if text.startswith("---"):
        parts = text.split("\n---", 1)
        if len(parts) != 2:
            raise ConfigError(
                path, "front matter", "the --- block is not closed", "end it with a line '---'"
            )
        head = parts[0][3:]
        body = parts[1].split("\n", 1)[1] if "\n" in parts[1] else ""
        import yaml  # only front matter needs it; a command that never reads agents skips it

        try:
            loaded = yaml.safe_load(head) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(
                path, "front matter", f"not valid YAML ({exc})", "fix the --- block"
            ) from None
        if not isinstance(loaded, dict):
            raise ConfigError(path, "front matter", "not a mapping", "use 'key: value' lines")
        meta = loaded
    meta.pop("name", None)
    if isinstance(meta.get("tools"), str):
        meta["tools"] = [t.strip() for t in meta["tools"].split(",") if t.strip()]
    meta["instructions"] = body.strip()
    try:
        agent = AgentConfig.model_validate(meta)
    except ValidationError as exc:
        _raise_validation(path, "", exc)
        raise  # pragma: no cover - _raise_validation always raises
    agent.source = str(path)
    return agent


def load_config(path: Path | str | None = None, *, cwd: Path | None = None) -> Config:
    """Load ``kernos.toml`` (``path``, else the working directory's; absent → defaults).

    Raises:
        ConfigError: unreadable TOML, an unknown key, a bad value or a missing ``${ENV}``.
    """
    cwd = cwd or Path.cwd()
    explicit = path is not None
    file = Path(path) if path is not None else cwd / "kernos.toml"
    data: dict[str, Any] = {}
    if file.exists():
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(
                file, "(syntax)", f"not valid TOML ({exc})", "fix the syntax"
            ) from None
        except OSError as exc:
            raise ConfigError(file, "(file)", f"cannot read ({exc})", "check the path") from None
    elif explicit:
        raise ConfigError(file, "(file)", "does not exist", "pass an existing file to --config")
    data = _expand_env(data, file, "")
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        _raise_validation(file, "", exc)
        raise  # pragma: no cover
    config.path = file if file.exists() else None
    config.home = kernos_home(cwd)
    agents_dir = config.home / "agents"
    if agents_dir.is_dir():
        for md in sorted(agents_dir.glob("*.md")):
            name = md.stem
            if name in config.agents:
                raise ConfigError(
                    md,
                    f"agents.{name}",
                    f"agent {name!r} is also defined in {file.name}",
                    "keep one definition",
                )
            config.agents[name] = parse_agent_file(md)
    for name, agent in config.agents.items():
        if agent.model is not None and not agent.model.strip():
            raise ConfigError(file, f"agents.{name}.model", "is blank", "remove it or name a model")
    return config
