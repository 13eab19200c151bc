"""Models, sessions, config, cassettes and the store."""

import typing

from kernos import _lazy

if typing.TYPE_CHECKING:
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

#: name -> private module, imported on first use: config and store never load pydantic-ai
_EXPORTS = {
    "NO_MODEL_MESSAGE": "_config",
    "AgentConfig": "_config",
    "CassetteError": "_cassette",
    "CategoryConfig": "_config",
    "Config": "_config",
    "ConfigError": "_config",
    "Migration": "_store",
    "ModelAlias": "_config",
    "NoModelError": "_config",
    "OutputConfig": "_config",
    "RecordingModel": "_cassette",
    "ReplayModel": "_cassette",
    "Runtime": "_runtime",
    "Session": "_session",
    "SessionEvent": "_session",
    "Store": "_store",
    "TasksConfig": "_config",
    "Watcher": "_session",
    "kernos_home": "_config",
    "latest_message_text": "_cassette",
    "load_config": "_config",
    "new_session_id": "_session",
    "parse_agent_file": "_config",
    "pick_model_name": "_models",
    "redact": "_store",
    "resolve_model": "_models",
    "write_cassette": "_cassette",
}

if not typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy.exports(__name__, _EXPORTS)
