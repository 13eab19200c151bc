"""A child's session, built three ways: for a spawn, rebuilt from its store row (a worker runs
another process's child; a revival continues an evicted one), or taken in from an earlier run of
its parent. :class:`ChildSessions` is that part of :class:`kernos.tasks.TaskManager`, which is
one; what it uses of the rest of the manager is declared on it."""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kernos.runtime import ConfigError, Permissions, Session, history_from_turns
from kernos.tasks._approvals import TaskWaiter
from kernos.tasks._prompts import prompt_text
from kernos.tasks._record import TaskRecord
from kernos.tasks._resolve import SpawnItem
from kernos.tasks._scheduler import RunHooks
from kernos.tasks._state import ACTIVE, NOTIFY, Residency, TaskStatus
from kernos.tasks._transcript import record_event

if TYPE_CHECKING:
    from kernos.boundary import ToolSpec
    from kernos.runtime import Config, Runtime
    from kernos.tasks._engine import TaskEngine
    from kernos.tasks._scheduler import TaskScheduler
    from kernos.tasks._store import TaskStore
    from kernos.tasks._teams import Teams

#: The tools only a parent gets; never granted to a child below the depth limit.
TASK_TOOL_NAMES = frozenset({"task", "task_send", "task_output", "task_cancel"})


def item_of(row: dict[str, Any]) -> SpawnItem:
    """The spawn item a child's store ``row`` was spawned from."""
    category = row["target"] if row["target_kind"] == "category" else None
    return SpawnItem(
        prompt=row["prompt"] or "",
        category=category,
        subagent_type=None if category is not None else row["target"],
        name=row["name"],
        task_summary=row["summary"],
        description=row["description"],
    )


class ChildSessions(RunHooks):
    """Builds, rebuilds and takes in children's sessions (the state the manager's
    ``__init__`` sets, and what this part calls of the rest of it, are declared here)."""

    runtime: Runtime
    config: Config
    store: TaskStore
    records: dict[str, TaskRecord]
    scheduler: TaskScheduler
    teams: Teams
    remote_tools: dict[str, ToolSpec[Any]] | None
    agent_tools: Callable[[str], Sequence[ToolSpec[Any]]] | None
    _model_of: dict[str, str]
    _root: dict[str, str]
    _sessions: weakref.WeakValueDictionary[str, Session]

    if TYPE_CHECKING:  # the manager's (kernos.tasks._manager)

        def tools_for(self, session: Session, *, depth: int = 0) -> list[ToolSpec[Any]]: ...
        def _root_of(self, session_id: str) -> str: ...

    @property
    def engine(self) -> TaskEngine:
        """What admits and runs the children (the scheduler's)."""
        return self.scheduler.engine

    def _create(
        self,
        parent: Session,
        item: SpawnItem,
        model_name: str,
        depth: int,
        background: bool,
        grants: Sequence[str],
        task_id: str,
    ) -> TaskRecord:
        record = TaskRecord(task_id, parent, item, model_name, depth, background)
        instructions, agent, own_tools = self._target(item)
        own = self.own_tools(item)
        names = [
            name
            for name in dict.fromkeys([*own, *grants, *own_tools])
            if (name in own or name in parent.tools) and name not in TASK_TOOL_NAMES
        ]
        record.grants = list(grants)
        record.session = self._child_session(
            record, instructions, agent, names, "s_" + record.id.removeprefix("t_")
        )
        self.records[record.id] = record
        self.store.insert(
            {
                "id": record.id,
                "parent_session": parent.session_id,
                "child_session": record.session.session_id,
                "depth": depth,
                "name": item.name,
                "summary": item.task_summary,
                "description": item.description,
                "label": item.label,
                "prompt": item.prompt,
                "target_kind": item.target_kind,
                "target": item.target,
                "model": model_name,
                "background": int(background),
                "status": str(record.status),
                "residency": str(record.residency),
                "run_epoch": record.run_epoch,
                "created_at": record.created_at,
                "engine": self.engine.name,
                "grants": json.dumps(list(grants)),
                "tools": json.dumps(names),
            }
        )
        self.store.event(record.id, "status", {"from": None, "to": "pending", "epoch": 1})
        return record

    def _target(self, item: SpawnItem) -> tuple[str, str, list[str]]:
        """``(instructions, agent name, the agent's own tools)`` of a child's target.

        Raises:
            ConfigError: the agent is not configured (any more).
        """
        if item.category is not None:
            category = self.config.categories.get(item.category)
            instructions = (category.instructions if category else "") or prompt_text(
                "worker_instructions.md"
            )
            return instructions, item.category, []
        definition = self.config.agent(item.subagent_type or "")
        return definition.instructions, item.subagent_type or "", list(definition.tools or [])

    def own_tools(self, item: SpawnItem) -> dict[str, ToolSpec[Any]]:
        """The tools a child gets from its agent's definition, by name (none for a category's
        worker, whose tools are the parent's grant)."""
        if item.category is not None or self.agent_tools is None:
            return {}
        specs = self.agent_tools(item.subagent_type or "")
        return {s.name: s for s in specs if s.name not in TASK_TOOL_NAMES}

    def _child_session(
        self,
        record: TaskRecord,
        instructions: str,
        agent: str,
        tools: Sequence[str],
        sid: str,
        available: dict[str, ToolSpec[Any]] | None = None,
    ) -> Session:
        """The child's own session: its turns go to the store (a later run rebuilds it from
        them) and its transcript to the task's events. ``tools`` are taken from ``available``
        (the parent's tools, or a worker's configured ones)."""
        rules = Permissions(self.config)
        offered = {
            name: spec
            for name, spec in {
                **(record.parent.tools if available is None else available),
                **self.own_tools(record.item),
            }.items()
            if rules.offered(agent, spec)  # a tool the child's agent denies is not offered
        }
        self._model_of[sid] = record.model_name
        # a child rebuilt where its parent does not run (a DBOS worker) counts under its parent
        self._root[sid] = self._root_of(record.parent.session_id)
        child = Session(
            # the DBOS engine wraps the model (its requests are steps, on either model engine:
            # its wrapper tells the lean engine how to wrap a lean model)
            self.engine.child_model(self.runtime.model(record.model_name)),
            instructions,
            # the DBOS engine makes each tool call a step too: a resumed run does not repeat it
            self.engine.child_tools([offered[name] for name in tools if name in offered]),
            agent=agent,
            session_id=sid,
            store=self.runtime.store,
            on_event=lambda event: record_event(self.store, record, event),
            repeat_limit=self.config.tasks.repeat_limit,
            empty_retries=self.config.empty_retries(record.model_name),
        )
        # a background child has nobody at a terminal waiting on it to ask
        child.can_ask = lambda: not record.background
        # an asked call nobody here may answer waits for an answer from the store
        child.waiter = TaskWaiter(self.scheduler, record)
        self.teams.equip(record, child)
        child.set_compaction(  # runtime/_session/_compacting.py
            self.config.compaction(
                record.model_name, record.item.category, record.item.subagent_type
            ),
            self.runtime.compactor,
        )
        if record.depth < self.config.tasks.max_depth:
            # steps too on the DBOS engine: a replayed task call answers what it answered, and
            # one in flight at a crash finds the children it spawned (``_replayed_ids``)
            own = self.tools_for(child, depth=record.depth)  # ruled like any tool (deny task)
            child.add_tools(self.engine.child_tools(self._ruled().apply(agent, own)))
            self._sessions[sid] = child
        return child

    def _ruled(self) -> Permissions:
        """The permission rules a child's own tools (task, team) go through, asked as its
        other tools are (the run's approver, else its waiter)."""
        return Permissions(self.config, self.runtime.approver)

    def rebuild(self, row: dict[str, Any], epoch: int) -> TaskRecord:
        """A child another process spawned, rebuilt from its store row and this process's config
        (the DBOS engine's workers): its tools come from :attr:`remote_tools`."""
        item = item_of(row)
        depth = int(row["depth"] or 1)
        # a grandchild whose parent (a child rebuilt here) runs in this process reports to it
        parent = self._sessions.get(row["parent_session"]) if depth > 1 else None
        if parent is None:  # the parent lives in another process: it reads the store
            parent = Session(
                self.runtime.model(row["model"]), agent="parent", session_id=row["parent_session"]
            )
        # a child's notice goes to its top-level parent from the process following it; a
        # grandchild's to its parent's inbox from whichever process ends it, claimed once
        notifies = depth > 1 and bool(row["background"])
        record = TaskRecord(row["id"], parent, item, row["model"], depth, notifies)
        record.status = TaskStatus(row["status"])
        record.run_epoch = epoch
        record.started_at = row["started_at"]
        record.grants = list(json.loads(row.get("grants") or "[]"))
        instructions, agent, own_tools = self._target(item)
        stored = row.get("tools")  # the resolved tools (resume's column); else grants + own
        names = (
            list(json.loads(stored))
            if stored
            else [
                n
                for n in dict.fromkeys([*self.own_tools(item), *record.grants, *own_tools])
                if n not in TASK_TOOL_NAMES
            ]
        )
        record.session = self._child_session(
            record,
            instructions,
            agent,
            names,
            row.get("child_session") or "s_" + record.id.removeprefix("t_"),
            available=self.remote_tools or {},
        )
        if epoch > 1:  # a revival continues the conversation of the child's earlier runs
            turns = self.runtime.store.turns(record.session.session_id)
            record.session.history = history_from_turns(earlier_runs(turns, epoch))
        if record.depth < self.config.tasks.max_depth:
            # the children an earlier attempt of this run spawned: followed to their ends
            self._adopt(record.session, durable=self._durable)
        return record

    # -- children of an earlier run ----------------------------------------------------------
    @property
    def _durable(self) -> bool:
        """Runs may be replayed (the DBOS engine): their children outlive any one process."""
        return self.engine.replays

    def _adopt(self, session: Session, *, durable: bool = False) -> None:
        """Take in the settled children an earlier run of ``session`` left in the store (a
        continued session, ``kernos run --continue``), so ``task_send`` and ``task_output`` find
        them by id or name and their names stay taken. Their conversations stay in the store
        until one is continued. An active row belongs to another live process: left alone.

        ``durable``: ``session`` is a durable child's, rebuilt on an executor (resumed after a
        crash, or a revival): its active children are followed to their ends (the engine's
        ``adopt``), wherever they run, and a settled one whose notice no one delivered yet
        (its end written by a reaper while nobody followed it) has it delivered now."""
        for row in self.store.children(session.session_id):
            known = self.records.get(row["id"])
            if known is not None:
                if durable and known.parent.session_id == session.session_id:
                    known.parent = session  # run here from its row before its parent was rebuilt
                continue
            try:
                status, residency = TaskStatus(row["status"]), Residency(row["residency"])
            except ValueError:
                continue  # a row this version does not know how to read
            if status in ACTIVE and not durable:
                continue
            record = TaskRecord(
                row["id"], session, item_of(row), row["model"], int(row["depth"] or 1),
                bool(row["background"]), status=status, residency=residency,
                run_epoch=int(row["run_epoch"] or 1), final_text=row["final_text"] or "",
                error=row["error"], created_at=row["created_at"], started_at=row["started_at"],
                finished_at=row["finished_at"],
            )  # fmt: skip
            record.executor = row.get("executor")
            self.records[record.id] = record
            if not durable:
                continue
            if status in ACTIVE:
                self.engine.adopt(record)
            elif record.background and status in NOTIFY and record.depth > 1:  # noqa: SIM102
                if int(row.get("notified_epoch") or 0) < record.run_epoch:  # not delivered yet
                    self.scheduler.notify(record)

    def _rebuild(self, record: TaskRecord) -> bool:
        """Bring an evicted child back in memory from the store: its session rebuilt from its
        agent or category, model and granted tools, its conversation from its stored turns.
        ``False`` (and the reason logged as a task event) when it cannot be."""
        row = self.store.get(record.id)
        sid = row["child_session"] if row else None
        turns = self.runtime.store.turns(sid) if sid else []
        why = None if turns else "its conversation is not in the store"
        if row is not None and why is None:
            try:
                instructions, agent, _ = self._target(record.item)
                names = json.loads(row["tools"] or "[]")
                session = self._child_session(record, instructions, agent, names, str(sid))
            except (ConfigError, ValueError) as exc:
                why = f"it cannot be rebuilt: {exc}"
        if why is not None:
            self.store.event(record.id, "revive_refused", {"why": why})
            return False
        session.history = history_from_turns(turns)
        self._adopt(session, durable=self._durable)  # its own children, when it may have had some
        self.scheduler.set_residency(record, Residency.RESIDENT)
        record.session = session
        return True


def earlier_runs(turns: Sequence[dict[str, Any]], epoch: int) -> list[dict[str, Any]]:
    """The stored ``turns`` of a child's runs before run ``epoch``: a run that is resumed
    replays its own turns (keyed ``EPOCH:N``, see :meth:`kernos.runtime.Session.key_turns`), so
    the ones an earlier attempt of it stored are not history it continues from."""
    kept = []
    for turn in turns:
        run, _, _ = str(turn.get("run_key") or "").partition(":")
        if not run.isdigit() or int(run) < epoch:
            kept.append(turn)
    return kept
