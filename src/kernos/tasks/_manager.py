"""The task manager: builds children and their tools on top of the scheduler.

One manager serves one runtime. Each child is a :class:`kernos.runtime.Session` of its own; its
record lives in memory while the child is resident and in the store for good. Running, transitions
and notices are :class:`kernos.tasks._scheduler.TaskScheduler`'s; this module resolves and spawns,
and :class:`TaskToolset` is the manager as one session's toolset.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kernos.boundary import ToolError, ToolSpec
from kernos.runtime import (
    BaseToolset,
    ConfigError,
    Permissions,
    Runtime,
    Session,
    history_from_turns,
)
from kernos.tasks._approvals import TaskWaiter
from kernos.tasks._engine import TaskEngine
from kernos.tasks._prompts import build_task_description, prompt_text
from kernos.tasks._resolve import SpawnItem, SpawnResolution, allowed_models, resolve_spawn_items
from kernos.tasks._scheduler import TaskRecord, TaskScheduler
from kernos.tasks._state import ACTIVE, NOTIFY, SETTLED, Residency, TaskStatus
from kernos.tasks._teams import Teams
from kernos.tasks._tools import task_tools

#: The tools only a parent gets; never granted to a child below the depth limit.
TASK_TOOL_NAMES = frozenset({"task", "task_send", "task_output", "task_cancel"})


class TaskManager(TaskScheduler):
    """Spawns and tracks sub-agent tasks for the sessions of one runtime.

    Usable without the CLI::

        manager = TaskManager(runtime)
        session = runtime.session("main", tools=[])
        session.add_tools(manager.tools_for(session))
        text = await manager.drive(session, "Audit the boundary with a child task.")
        await manager.aclose(wait=True)

    Args:
        runtime: models, config and the store.
        skill_dirs: where ``load_skills`` looks, in order (default: ``HOME/skills`` then
            ``~/.config/kernos/skills``).
        reconcile: mark tasks left pending/running by a dead process ``lost`` on start.
        engine: makes the engine that runs the children (default: as configured).
        agent_tools: the tools a child of an agent gets from that agent's definition, by agent
            name (``kernos._app`` gives the catalog's and the MCP servers' selection for it);
            default: only tools the parent has, by the exact names the agent lists.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        skill_dirs: Sequence[Path] | None = None,
        reconcile: bool = True,
        engine: Callable[[TaskScheduler], TaskEngine] | None = None,
        agent_tools: Callable[[str], Sequence[ToolSpec[Any]]] | None = None,
    ) -> None:
        super().__init__(runtime, reconcile=reconcile, engine=engine)
        self.skill_dirs = (
            list(skill_dirs)
            if skill_dirs is not None
            else [self.config.home / "skills", Path.home() / ".config" / "kernos" / "skills"]
        )
        self.description = build_task_description(self.config)
        self._categories = tuple(sorted(self.config.categories))
        self._agents = tuple(sorted(self.config.spawnable_agents))
        self._depth: dict[str, int] = {}
        #: each child session's model string, by session id (what its own children may name)
        self._model_of: dict[str, str] = {}
        #: the root session of each session that may spawn, by session id, and how many
        #: children (spawns and revivals) each root's run started: ``[tasks] max_children``
        self._root: dict[str, str] = {}
        self._started: dict[str, int] = {}
        #: the tools a child rebuilt from the store may be granted, by name (a worker's
        #: configured tools; in ``kernos run``, its main session's)
        self.remote_tools: dict[str, ToolSpec[Any]] | None = None
        #: a child's own tools by its agent's definition (see ``agent_tools`` above): a child
        #: gets them whether or not its parent has them; the parent's ``tools`` grant adds more
        self.agent_tools = agent_tools
        #: the sessions of this process's children that may spawn children of their own, by
        #: session id: a grandchild rebuilt here (a worker) reports to its parent if it is here
        self._sessions: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        #: the teams the sessions here lead or belong to (``team`` on a ``task`` item)
        self.teams = Teams(self)

    # -- tools -------------------------------------------------------------------------------
    def tools_for(self, session: Session, *, depth: int = 0) -> list[ToolSpec[Any]]:
        """The four task tools bound to ``session`` (a top-level session has ``depth`` 0);
        the children an earlier run of the same session left are taken in."""
        self._depth[session.session_id] = depth
        self._root.setdefault(session.session_id, session.session_id)
        if depth == 0:
            if self.remote_tools is None:
                self.remote_tools = session.tools  # the same config's tools, for others' children
            self._adopt(session)
        return task_tools(self, session)

    def grantable(self, session: Session) -> tuple[str, ...]:
        return tuple(sorted(name for name in session.tools if name not in TASK_TOOL_NAMES))

    def resolve(self, params: Any, session: Session) -> SpawnResolution:
        return resolve_spawn_items(
            params,
            categories=self._categories,
            agents=self._agents,
            tools=self.grantable(session),
            models=self.allowed_models(session),
        )

    def allowed_models(self, session: Session) -> tuple[str, ...]:
        """What ``session``'s ``task`` calls may name as a child's ``model``: the configured
        aliases and ``session``'s own model string (see
        :func:`kernos.tasks._resolve.allowed_models`)."""
        return allowed_models(self.config.models, self._own_model(session))

    def _own_model(self, session: Session) -> str | None:
        """The model string ``session`` runs on (``None``: it cannot be told)."""
        own = self._model_of.get(session.session_id)
        if own is None:  # a top-level session: on its agent's model, as Runtime.session picks it
            try:
                own = self.runtime.model_name(session.agent)
            except ConfigError:
                own = None
        return own

    # -- spawning ----------------------------------------------------------------------------
    def spawn(
        self, session: Session, resolution: SpawnResolution, *, background: bool | None = None
    ) -> list[TaskRecord]:
        """Create and start every child of a resolved call; all or nothing.

        Raises:
            ToolError: the depth limit, the run's ``max_children``, a taken name, or a model that
                cannot be built.
        """
        models = self.check_spawn(session, resolution)
        depth = self._depth.get(session.session_id, 0)
        in_background = resolution.background if background is None else background
        count = len(resolution.items)
        ids = self._replayed_ids(session, count) or self._new_ids(count)
        records: list[TaskRecord] = []
        fresh: list[TaskRecord] = []
        for item, model, task_id in zip(resolution.items, models, ids, strict=True):
            known = self.records.get(task_id)
            if known is not None:  # this call, replayed: the child it spawned before the crash
                # in its events: the resumed parent's call took it in (``kernos tasks show``)
                self.store.event(known.id, "rejoined", {"parent": session.session_id})
                records.append(known)
                continue
            self.teams.enlist(session, item, task_id)
            record = self._create(session, item, model, depth + 1, in_background,
                                  resolution.tools, task_id)  # fmt: skip
            records.append(record)
            fresh.append(record)
        self._count_children(session, len(fresh))
        for record in fresh:
            self._start(record, self._first_message(record))
        return records

    # -- the per-run cap on children ---------------------------------------------------------
    def _root_of(self, session_id: str) -> str:
        return self._root.get(session_id, session_id)

    def _children_left(self, session: Session) -> int | None:
        """How many more children ``session``'s run may start (``None``: no limit)."""
        cap = self.config.tasks.max_children
        if not cap:
            return None
        return max(cap - self._started.get(self._root_of(session.session_id), 0), 0)

    def _count_children(self, session: Session, count: int) -> None:
        root = self._root_of(session.session_id)
        self._started[root] = self._started.get(root, 0) + count

    def _too_many(self, session: Session, outcome: str) -> ToolError:
        cap = self.config.tasks.max_children
        started = self._started.get(self._root_of(session.session_id), 0)
        return ToolError(
            "too_many_children",
            f"Too many child tasks: this run may start {cap} (task_send revivals count too) and "
            f"has started {started}; {outcome}. Do the remaining work yourself.",
            {"max_children": cap, "started": started},
        )

    def _replayed_ids(self, session: Session, count: int) -> list[str] | None:
        """The ids a ``task`` call of a durable run gives its ``count`` children: the same on
        every replay of the call (see the DBOS engine's ``spawn_ids``), or ``None`` (fresh
        random ids). A candidate that is another session's task is passed over, the same way
        on every replay. Children of this call already in the store are taken in."""
        for salt in range(8):
            ids = self.engine.spawn_ids(count, salt)
            if ids is None:
                return None
            rows = self.store.rows(ids)
            others = [r for r in rows.values() if r["parent_session"] != session.session_id]
            if len(set(ids)) < count or others:
                continue
            if any(task_id not in self.records for task_id in rows):
                self._adopt(session, durable=True)
            return ids
        return None

    def check_spawn(self, session: Session, resolution: SpawnResolution) -> list[str]:
        """Every rule a spawn must pass before anything starts (the ``task`` tool's semantic
        stage): a resolved call, the depth limit, free names, usable models. Returns the model
        name of each item.

        Raises:
            ToolError: the first rule the call breaks.
        """
        if resolution.kind != "ok":
            raise resolution.error or ToolError("invalid_arguments", "invalid task call")
        depth = self._depth.get(session.session_id, 0)
        if depth >= self.config.tasks.max_depth:
            raise ToolError(
                "depth_limit",
                f"Sub-tasks may not start further sub-tasks (depth limit "
                f"{self.config.tasks.max_depth}); do the work yourself.",
            )
        replayed = self._replayed_ids(session, len(resolution.items))
        left = self._children_left(session)
        if left is not None:
            # a replayed call's children that exist already were counted when it first ran
            new = (
                len(resolution.items)
                if replayed is None
                else sum(1 for task_id in replayed if task_id not in self.records)
            )
            if new > left:
                raise self._too_many(
                    session, f"this call would start {new} more, so nothing was spawned"
                )
        self._check_names(session, resolution.items, replayed)
        self.teams.check(session, resolution.items)
        models = [self._model_name(item, session) for item in resolution.items]
        for name in set(models):
            try:
                self.runtime.model(name)
            except ConfigError as exc:
                raise ToolError(
                    "model_unavailable", f"Model {name} cannot be used: {exc}. Nothing was spawned."
                ) from None
        return models

    def _check_names(
        self, session: Session, items: Sequence[SpawnItem], replayed: Sequence[str] | None = None
    ) -> None:
        """``replayed``: this call's own children, when it is a replay (their names are theirs)."""
        mine = set(replayed or ())
        taken = {
            r.name: f"task {r.id}" for r in self.children(session) if r.name and r.id not in mine
        }
        for item in items:
            if item.name is None:
                continue
            if item.name in taken:
                raise ToolError(
                    "name_taken",
                    f'The name "{item.name}" is already used ({taken[item.name]}). Continue that '
                    f'task with task_send(to="{item.name}") or choose another name; nothing was '
                    "spawned.",
                )
            taken[item.name] = "twice in this call"

    def _model_name(self, item: SpawnItem, parent: Session) -> str:
        if item.category is not None:
            category = self.config.categories.get(item.category)
            return self.runtime.model_name("", category.model if category else None)
        agent = item.subagent_type or ""
        if item.model is None and agent not in self.config.agents:
            # the built-in ``general`` agent (Config.spawnable_agents) runs on its parent's model
            return self.runtime.model_name(agent, self._own_model(parent))
        return self.runtime.model_name(agent, item.model)

    def _new_ids(self, count: int) -> list[str]:
        """``count`` fresh task ids, unique here and in the store: one read of the store for a
        whole batch (a fan-out of 16 does not commit and query 16 times)."""
        fresh: list[str] = []
        while len(fresh) < count:
            drawn = {"t_" + secrets.token_hex(4) for _ in range(count - len(fresh))}
            drawn -= {*self.records, *fresh}
            taken = self.store.rows(sorted(drawn)) if drawn else {}
            fresh += sorted(drawn - set(taken))
        return fresh

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
            on_event=lambda event: self._on_child_event(record, event),
            repeat_limit=self.config.tasks.repeat_limit,
            empty_retries=self.config.empty_retries(record.model_name),
        )
        # a background child has nobody at a terminal waiting on it to ask
        child.can_ask = lambda: not record.background
        # an asked call nobody here may answer waits for an answer from the store
        child.waiter = TaskWaiter(self, record)
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
        category = row["target"] if row["target_kind"] == "category" else None
        item = SpawnItem(
            prompt=row["prompt"] or "",
            category=category,
            subagent_type=None if category else row["target"],
            name=row["name"],
            task_summary=row["summary"],
            description=row["description"],
        )
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
            category = row["target"] if row["target_kind"] == "category" else None
            item = SpawnItem(
                prompt=row["prompt"] or "",
                category=category,
                subagent_type=None if category is not None else row["target"],
                task_summary=row["summary"],
                description=row["description"],
                name=row["name"],
            )
            record = TaskRecord(
                row["id"], session, item, row["model"], int(row["depth"] or 1),
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
                    self.notify(record)

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
        self._set_residency(record, Residency.RESIDENT)
        record.session = session
        return True

    def revive(self, record: TaskRecord, message: str) -> bool:
        """Continue a settled child on its own conversation (``run_epoch`` + 1); an evicted one
        (a child of an earlier run) is rebuilt from the store first.

        Raises:
            ToolError: ``too_many_children``: the run started ``[tasks] max_children`` already.
        """
        left = self._children_left(record.parent)
        if left is not None and left < 1:
            raise self._too_many(record.parent, f"{record.id} was not revived")
        evicted = record.residency == Residency.EVICTED and record.session is None
        if record.status in SETTLED and evicted and not self._rebuild(record):
            return False
        revived = super().revive(record, message)
        if revived:
            self._count_children(record.parent, 1)
        return revived

    def _first_message(self, record: TaskRecord) -> str:
        preamble = prompt_text("child_preamble.md").format(
            task_id=record.id, parent=record.parent.session_id
        )
        blocks, missing = self.load_skills(record.item.load_skills)
        record.missing_skills = missing
        seat = self.teams.seat(record.id)
        guidance = (
            self.teams.guidance(record, self.teams.names(seat.lead, seat.team)) if seat else None
        )
        return "\n\n".join(
            [preamble, *blocks, record.item.prompt, *([guidance] if guidance else [])]
        )

    # -- teams (kernos.tasks._teams) ---------------------------------------------------------
    def _before_run(self, record: TaskRecord, session: Session) -> None:
        self.teams.meter(record, session)

    async def _take_mail(self, record: TaskRecord, ordinal: int) -> str | None:
        if record.run_key is None:  # the local engine: read in this loop step
            return self.teams.take(record, ordinal)
        if self.teams.seats.get(record.id, True) is None:
            return None  # known to be in no team: no suspension, as before teams
        return await asyncio.to_thread(self.teams.take, record, ordinal)

    def load_skills(self, names: Iterable[str]) -> tuple[list[str], list[str]]:
        """``(skill blocks, missing names)`` for ``load_skills``; a missing skill is no error."""
        blocks: list[str] = []
        missing: list[str] = []
        for name in names:
            text = None
            if "/" not in name and "\\" not in name and not name.startswith("."):
                for root in self.skill_dirs:
                    path = root / name / "SKILL.md"
                    if path.is_file():
                        text = path.read_text(encoding="utf-8").strip()
                        break
            if text is None:
                missing.append(name)
            else:
                blocks.append(f'<skill name="{name}">\n{text}\n</skill>')
        return blocks, missing

    async def drive(self, session: Session, text: str) -> str:
        """Prompt ``session``, then deliver completion notices as new turns until no child of it
        is outstanding; returns the last text (what ``kernos run`` does, for library users)."""
        return await session.serve(text, [self.attachment(session)])

    def attachment(self, session: Session) -> TaskToolset:
        """The manager as ``session``'s toolset (what ``kernos run`` composes)."""
        return TaskToolset(self.runtime, manager=self, session=session)


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


class TaskToolset(BaseToolset):
    """Sub-agent tasks as a toolset: ``task``, ``task_send``, ``task_output``, ``task_cancel``.

    Bound to the first session it gives tools to; ``outstanding`` is that session's children.
    On exit every child is waited for (``wait``) or abandoned as ``lost``.

    Args:
        runtime: models, config and the store.
        wait: on exit, wait for unfinished children (``False``: record them ``lost``).
        manager: share an existing manager (default: a new one).
        session: the parent session, when known already.
    """

    name = "tasks"

    def __init__(
        self,
        runtime: Runtime,
        *,
        wait: bool = True,
        manager: TaskManager | None = None,
        session: Session | None = None,
    ) -> None:
        self.manager = manager if manager is not None else TaskManager(runtime)
        self.session = session
        self.wait = wait
        if not wait:  # the run ends at its first idle: no completion notice will reach it
            self.manager.delivers_results = False

    async def tools(self, session: Session) -> list[ToolSpec[Any]]:
        if self.session is None:
            self.session = session
        return self.manager.tools_for(session)

    def outstanding(self) -> bool:
        # between the lead's turns: team mail for it becomes its next turn
        if self.session is not None and self.manager.teams.deliver_lead(self.session):
            return True
        return self.manager.outstanding(self.session)

    async def wait_change(self) -> None:
        await self.manager.wait_change(self.session)

    def host_lead(self, session: Session) -> None:
        """``kernos mcp``: the host is ``session``'s lead, with the lead's team tools from the
        start (see :meth:`kernos.tasks._teams.Teams.seat_lead`)."""
        self.session = self.session or session
        self.manager.teams.seat_lead(session)

    def lead_mail(self) -> bool:
        """The team mail for the session, claimed now and queued on it (``kernos mcp`` appends
        it to the host's next tool result); ``True`` when there was some."""
        return self.session is not None and self.manager.teams.deliver_lead(self.session)

    async def cancel(self, reason: str) -> None:
        """Stop every child now, each recorded ``cancelled`` with ``reason``."""
        self.manager.cancel_all(reason)
        await self.manager.wait_all()
        self.manager.store.flush()

    async def aclose(self, *, wait: bool | None = None) -> None:
        await self.manager.aclose(wait=self.wait if wait is None else wait)
