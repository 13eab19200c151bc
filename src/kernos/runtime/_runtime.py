"""The runtime: config, home, store and models for one process, and sessions built from them.

Opening a runtime reads the config and nothing more: the model machinery (pydantic-ai, the provider
SDKs) is imported by the first :meth:`Runtime.model_name`, :meth:`Runtime.model` or
:meth:`Runtime.session`, so ``kernos tasks list`` starts as fast as a store query can.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernos.runtime._config._config import Config, ConfigError
from kernos.runtime._config._config_load import agent_model_problem, load_config
from kernos.runtime._config._workspace import WorkspacePolicy
from kernos.runtime._session._sessions import record_session
from kernos.runtime._store._store import Store

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from kernos.boundary import ToolSpec
    from kernos.runtime._approval._approval import Approver
    from kernos.runtime._session._compacting import Compactor
    from kernos.runtime._session._session import Session, SessionEvent


class Runtime:
    """What every command needs: the loaded config, the kernos home, the store and the models.

    Args:
        config: the loaded configuration.
        model: a model string or alias that overrides every agent's model (``--model``).
        record: a cassette path; every model is wrapped so its turns are written there.
    """

    def __init__(self, config: Config, *, model: str | None = None, record: Path | None = None):
        self.config = config
        self.model_override = model
        self.record = record
        self._workspace: WorkspacePolicy | None = None
        self._store: Store | None = None
        self._models: dict[str, Model] = {}
        self._recorded: list[dict[str, Any]] = []
        #: who answers the calls the permission rules say to ask about (the CLI sets it: a
        #: terminal prompt, ``--approve``/``--yes``); ``None``: nobody, they are refused
        self.approver: Approver | None = None
        #: what writes compaction summaries (set by kernos._app: the compress protocol); ``None``:
        #: sessions never compact
        self.compactor: Compactor | None = None

    @classmethod
    def open(
        cls,
        config_path: Path | str | None = None,
        *,
        cwd: Path | None = None,
        model: str | None = None,
        record: Path | None = None,
    ) -> Runtime:
        """Load the config (see :func:`load_config`) and make a runtime for it."""
        return cls(load_config(config_path, cwd=cwd), model=model, record=record)

    @property
    def home(self) -> Path:
        return self.config.home

    @property
    def store(self) -> Store:
        """The store (SQLite, or PostgreSQL with ``[store] url``), opened (and migrated) on
        first use."""
        if self._store is None:
            self._store = Store.open(self.home, self.config.store_url)
        return self._store

    @property
    def workspace(self) -> WorkspacePolicy | None:
        """The workspace policy of ``[workspace]`` (built on first use), for tool contexts;
        ``None`` while the section is wrong (the tools that need it report the config error)."""
        if self._workspace is None:
            try:
                self._workspace = WorkspacePolicy.from_config(self.config)
            except ConfigError:
                return None
        return self._workspace

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def model_name(self, agent: str = "main", explicit: str | None = None) -> str:
        """Which model an agent runs on: explicit, ``--model``, the agent's, env, default."""
        from kernos.runtime._models._models import pick_model_name

        chosen = explicit or self.model_override
        configured = self.config.agents.get(agent)
        if not (chosen and chosen.strip()):  # the agent's own model counts only when chosen
            problem = agent_model_problem(self.config, agent)
            if problem is not None:
                raise problem
        return pick_model_name(chosen, self.config, configured.model if configured else None)

    def model(self, name: str) -> Model:
        """The model called ``name``; built once per runtime."""
        from kernos.runtime._models._cassette import RecordingModel
        from kernos.runtime._models._clean import clean_model
        from kernos.runtime._models._models import resolve_model

        if name not in self._models:
            built = clean_model(resolve_model(name, self.config))  # before a cassette sees it
            if self.record is not None:
                built = RecordingModel(built, self.record, self._recorded)
            self._models[name] = built
        return self._models[name]

    def session(
        self,
        agent: str = "main",
        *,
        tools: Iterable[ToolSpec[Any]] = (),
        model: str | None = None,
        instructions: str | None = None,
        session_id: str | None = None,
        on_event: Callable[[SessionEvent], None] | None = None,
        record_turns: bool = True,
        stream: bool = False,
        without_model: bool = False,
    ) -> Session:
        """A new session for ``agent`` (its instructions and model unless overridden); one that
        records its turns is noted in the store's ``sessions`` table. ``stream``: its text
        arrives as ``delta`` events too.

        ``session_id`` of an earlier session continues that id: assign the restored history
        (:func:`kernos.runtime.load_history`) before the first prompt.

        ``without_model``: a model that cannot be built (no model named, no API key) does not stop
        the session, whose requests then raise that :class:`ConfigError` (``kernos mcp``: the host
        is the agent, only some tools need a model).
        """
        from kernos.runtime._session._session import Session

        definition = self.config.agent(agent)
        try:
            model_name = self.model_name(agent, model)
            built = self.model(model_name)
        except ConfigError as exc:
            if not without_model:
                raise
            model_name = model or "(no model)"
            built = unusable_model(model_name, exc)
        session = Session(
            built,
            definition.instructions if instructions is None else instructions,
            tools,
            agent=agent,
            session_id=session_id,
            store=self.store if record_turns else None,
            on_event=on_event,
            retries=self.config.retries,
            repeat_limit=self.config.tasks.repeat_limit,
            workspace=self.workspace,
            stream=stream,
            empty_retries=self.config.empty_retries(model_name),
        )
        session.set_compaction(self.config.compaction(model_name, agent=agent), self.compactor)
        if record_turns:  # a top-level session: `kernos sessions` lists it, `run --session` too
            record_session(self.store, session.session_id, agent, model_name)
        session.set_budget(self.config.agent_budget(agent))  # its timeout caps `kernos run`
        return session


def unusable_model(name: str, error: ConfigError) -> Model:
    """A model that could not be built, standing in for it: every request raises ``error``."""
    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.models import Model, ModelRequestParameters
    from pydantic_ai.settings import ModelSettings

    class UnusableModel(Model):
        @property
        def model_name(self) -> str:
            return name

        @property
        def system(self) -> str:
            return "kernos"

        async def request(
            self,
            messages: list[ModelMessage],
            model_settings: ModelSettings | None,
            model_request_parameters: ModelRequestParameters,
        ) -> ModelResponse:
            raise error

    return UnusableModel()
