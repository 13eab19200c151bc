"""Models, sessions, config, the workspace policy, cassettes and the store."""

import typing

from kernos import _lazy

if typing.TYPE_CHECKING:
    from kernos.runtime._approval._approval import (
        ApprovalAnswer,
        ApprovalRequest,
        Approver,
        FlagApprover,
        NoApprover,
        Permissions,
        PermissionToolset,
        describe_arguments,
        request_text,
        user_name,
    )
    from kernos.runtime._approval._approval_store import ApprovalStore
    from kernos.runtime._config._claude import (
        CLAUDE_CODE_MODELS,
        CLAUDE_CODE_TOOL_MAP,
        claude_tool_equivalent,
        claude_tool_instead,
        is_claude_tool,
        map_claude_tools,
    )
    from kernos.runtime._config._config import (
        KERNOS_TOOLS,
        NO_MODEL_MESSAGE,
        Config,
        NoModelError,
        kernos_tool_home,
    )
    from kernos.runtime._config._config_load import (
        agent_model_problem,
        load_config,
        load_config_problems,
        parse_agent_file,
    )
    from kernos.runtime._config._config_tables import (
        AgentConfig,
        CategoryConfig,
        McpServerConfig,
        ModelAlias,
        ModelPrice,
        PermissionsConfig,
        TasksConfig,
        peek_store_url,
    )
    from kernos.runtime._config._home import (
        config_file,
        expand_env,
        kernos_home,
        project_root,
        register_config_urls,
    )
    from kernos.runtime._config._reference import (
        config_reference,
        reference_record,
        render_reference,
    )
    from kernos.runtime._config._windows import ModelWindow, known_window
    from kernos.runtime._config._workspace import (
        NotRegularFile,
        WorkspacePolicy,
        WorkspaceRefused,
        open_regular,
        path_problem,
        path_refusal,
    )
    from kernos.runtime._errors import ConfigError, EmptyAnswers, KernosError
    from kernos.runtime._models._cassette import (
        CassetteError,
        RecordingModel,
        ReplayModel,
        latest_message_text,
    )
    from kernos.runtime._models._lean_models import LeanModel, WrapperLean
    from kernos.runtime._models._lean_wire import Reply
    from kernos.runtime._models._model_adapter import response_reply
    from kernos.runtime._models._model_errors import ModelTarget, model_failure
    from kernos.runtime._models._models import model_target, pick_model_name, resolve_model
    from kernos.runtime._rules._approval_state import (
        ApprovalState,
        StoredRequest,
        already_answered,
        denial_reason,
    )
    from kernos.runtime._rules._budget import (
        DURATION_FIX,
        Budget,
        BudgetExceeded,
        BudgetMeter,
        format_duration,
        parse_duration,
    )
    from kernos.runtime._rules._compaction import CompactSettings, Summary
    from kernos.runtime._rules._foreign import KERNOS_SOURCE, delimited, from_source
    from kernos.runtime._rules._permissions import (
        Decision,
        PermissionTable,
        decide,
        parse_entry,
        unmatched_entries,
    )
    from kernos.runtime._runtime import Runtime
    from kernos.runtime._secrets import (
        forget_secrets,
        install_log_scrubber,
        known_secrets,
        redact,
        register_env_secrets,
        register_secrets,
        register_url_secrets,
        scrub_result,
        scrub_text,
        scrub_value,
        url_secrets,
    )
    from kernos.runtime._session._compacting import (
        Compacted,
        CompactionStep,
        Compactor,
        CompactOutcome,
    )
    from kernos.runtime._session._compaction_store import (
        compaction_text,
        compactions,
        latest_summary,
    )
    from kernos.runtime._session._history import history_from_turns, load_history
    from kernos.runtime._session._lean import usage_responses
    from kernos.runtime._session._pydantic_ai import NormalizedToolset, as_pydantic_ai, normalized
    from kernos.runtime._session._session import Session, SessionEvent, new_session_id
    from kernos.runtime._session._session_port import SessionPort
    from kernos.runtime._session._sessions import (
        get_session,
        latest_session,
        list_sessions,
        record_session,
        session_events,
    )
    from kernos.runtime._session._toolsets import (
        BaseToolset,
        StaticToolset,
        Toolset,
        Watcher,
        cancel_toolsets,
        shielded,
    )
    from kernos.runtime._session._usage import (
        GROUPS,
        add_call_counts,
        aggregate,
        cost_text,
        parse_since,
        price,
        reprice,
        response_usage,
        summary_line,
        total,
    )
    from kernos.runtime._session._usage_log import open_usage, record_call
    from kernos.runtime._store._dialect import display_url, is_postgres_url
    from kernos.runtime._store._store import Migration, Store, StoreError
    from kernos.runtime._trace._trace import span

__all__ = [
    "CLAUDE_CODE_MODELS",
    "CLAUDE_CODE_TOOL_MAP",
    "DURATION_FIX",
    "GROUPS",
    "KERNOS_SOURCE",
    "KERNOS_TOOLS",
    "NO_MODEL_MESSAGE",
    "AgentConfig",
    "ApprovalAnswer",
    "ApprovalRequest",
    "ApprovalState",
    "ApprovalStore",
    "Approver",
    "BaseToolset",
    "Budget",
    "BudgetExceeded",
    "BudgetMeter",
    "CassetteError",
    "CategoryConfig",
    "CompactOutcome",
    "CompactSettings",
    "Compacted",
    "CompactionStep",
    "Compactor",
    "Config",
    "ConfigError",
    "Decision",
    "EmptyAnswers",
    "FlagApprover",
    "KernosError",
    "LeanModel",
    "McpServerConfig",
    "Migration",
    "ModelAlias",
    "ModelPrice",
    "ModelTarget",
    "ModelWindow",
    "NoApprover",
    "NoModelError",
    "NormalizedToolset",
    "NotRegularFile",
    "PermissionTable",
    "PermissionToolset",
    "Permissions",
    "PermissionsConfig",
    "RecordingModel",
    "ReplayModel",
    "Reply",
    "Runtime",
    "Session",
    "SessionEvent",
    "SessionPort",
    "StaticToolset",
    "Store",
    "StoreError",
    "StoredRequest",
    "Summary",
    "TasksConfig",
    "Toolset",
    "Watcher",
    "WorkspacePolicy",
    "WorkspaceRefused",
    "WrapperLean",
    "add_call_counts",
    "agent_model_problem",
    "aggregate",
    "already_answered",
    "as_pydantic_ai",
    "cancel_toolsets",
    "claude_tool_equivalent",
    "claude_tool_instead",
    "compaction_text",
    "compactions",
    "config_file",
    "config_reference",
    "cost_text",
    "decide",
    "delimited",
    "denial_reason",
    "describe_arguments",
    "display_url",
    "expand_env",
    "forget_secrets",
    "format_duration",
    "from_source",
    "get_session",
    "history_from_turns",
    "install_log_scrubber",
    "is_claude_tool",
    "is_postgres_url",
    "kernos_home",
    "kernos_tool_home",
    "known_secrets",
    "known_window",
    "latest_message_text",
    "latest_session",
    "latest_summary",
    "list_sessions",
    "load_config",
    "load_config_problems",
    "load_history",
    "map_claude_tools",
    "model_failure",
    "model_target",
    "new_session_id",
    "normalized",
    "open_regular",
    "open_usage",
    "parse_agent_file",
    "parse_duration",
    "parse_entry",
    "parse_since",
    "path_problem",
    "path_refusal",
    "peek_store_url",
    "pick_model_name",
    "price",
    "project_root",
    "record_call",
    "record_session",
    "redact",
    "reference_record",
    "register_config_urls",
    "register_env_secrets",
    "register_secrets",
    "register_url_secrets",
    "render_reference",
    "reprice",
    "request_text",
    "resolve_model",
    "response_reply",
    "response_usage",
    "scrub_result",
    "scrub_text",
    "scrub_value",
    "session_events",
    "shielded",
    "span",
    "summary_line",
    "total",
    "unmatched_entries",
    "url_secrets",
    "usage_responses",
    "user_name",
]


if not typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy.exports(__name__)
