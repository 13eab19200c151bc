"""Models, sessions, config, cassettes and the store."""

from kernos.runtime._cassette import (
    CassetteError,
    RecordingModel,
    ReplayModel,
    latest_message_text,
    write_cassette,
)
from kernos.runtime._config import (
    NO_MODEL_MESSAGE,
    AgentConfig,
    CategoryConfig,
    Config,
    ConfigError,
    ModelAlias,
    NoModelError,
    OutputConfig,
    TasksConfig,
    ToolConfig,
    kernos_home,
    load_config,
    parse_agent_file,
)
from kernos.runtime._models import pick_model_name, resolve_model
from kernos.runtime._runtime import Runtime
from kernos.runtime._session import Session, SessionEvent, Watcher, new_session_id
from kernos.runtime._store import Migration, Store, redact

__all__ = [
    "NO_MODEL_MESSAGE",
    "AgentConfig",
    "CassetteError",
    "CategoryConfig",
    "Config",
    "ConfigError",
    "Migration",
    "ModelAlias",
    "NoModelError",
    "OutputConfig",
    "RecordingModel",
    "ReplayModel",
    "Runtime",
    "Session",
    "SessionEvent",
    "Store",
    "TasksConfig",
    "ToolConfig",
    "Watcher",
    "kernos_home",
    "latest_message_text",
    "load_config",
    "new_session_id",
    "parse_agent_file",
    "pick_model_name",
    "redact",
    "resolve_model",
    "write_cassette",
]
