"""What the agent loop, its toolset and compaction need of a session: the port they meet it
through. :class:`kernos.runtime._session._session.Session` is the one implementation; the loop
(:mod:`kernos.runtime._session._lean`), the toolset (:mod:`kernos.runtime._session._toolset`) and
compaction (:mod:`kernos.runtime._session._compacting`) import this module, never the session's, so
the session sits above them and nothing below it imports it back
(``tests/test_import_cycles.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from kernos.boundary import ToolResult, ToolSpec
    from kernos.runtime._rules._budget import BudgetMeter
    from kernos.runtime._rules._compaction import Message, Summary
    from kernos.runtime._store._store import Store


class View(Protocol):
    """What compaction reads of a session's conversation: every message as wire dicts (nothing
    dropped), and the request that would be sent now
    (:class:`kernos.runtime._session._lean.LeanLoop`)."""

    @property
    def messages(self) -> list[Message]: ...

    def wire(self) -> list[Message]: ...

    def tools_text(self) -> str: ...


class Compacting(Protocol):
    """What the loop calls of a session's compaction step
    (:class:`kernos.runtime._session._compacting.CompactionStep`)."""

    async def before_request(self, loop: View) -> object:
        """Compact when the request the loop would send now crosses the threshold."""
        ...

    def reported(self, prompt_tokens: int) -> None:
        """The provider's ``prompt_tokens`` for the request last measured."""
        ...


class SessionPort(Protocol):
    """A session as the loop, its toolset and compaction see it."""

    session_id: str
    agent: str
    model: Model
    #: where the turns go (``None``: recorded nowhere)
    store: Store | None
    #: where the usage rows go (``store``, else the usage store)
    usage_store: Store | None
    tools: dict[str, ToolSpec[Any]]
    budget: BudgetMeter | None
    stream: bool
    empty_retries: int
    #: the approved summary the model is sent instead of the turns it covers
    summary: Summary | None
    #: how the current prompt failed, raised once its turns and usage are recorded
    _failure: Exception | None
    _stop_requested: bool
    #: each call's result by call id, until its turn is recorded
    _results: dict[str, ToolResult]

    @property
    def compacting(self) -> Compacting | None:
        """The session's compaction step (``None``: it never compacts)."""
        ...

    @property
    def system_prompt(self) -> str: ...

    def _before_request(self) -> bool: ...

    def _turn_key(self) -> str | None: ...

    def emit(self, kind: str, **data: Any) -> None: ...

    def emit_delta(self, text: str) -> None: ...

    def emit_result(self, name: str, result: ToolResult, call_id: str | None) -> None: ...
