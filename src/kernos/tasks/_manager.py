"""The task manager: builds children and their tools, and holds the scheduler that runs them.

One manager serves one runtime. Each child is a :class:`kernos.runtime.Session` of its own; its
record lives in memory while the child is resident and in the store for good. Running, transitions
and notices are the :class:`kernos.tasks._scheduler.TaskScheduler`'s the manager holds (its
:attr:`TaskManager.scheduler`); this module resolves and spawns, :mod:`kernos.tasks._children`
builds the children's sessions, and :class:`TaskToolset` is the manager as one session's toolset.
"""

from __future__ import annotations

import asyncio
import secrets
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kernos.boundary import ToolError, ToolSpec
from kernos.runtime import BaseToolset, ConfigError, Runtime, Session
from kernos.tasks._children import TASK_TOOL_NAMES as TASK_TOOL_NAMES
from kernos.tasks._children import ChildSessions
from kernos.tasks._engine import TaskEngine
from kernos.tasks._prompts import build_task_description, prompt_text
from kernos.tasks._record import TaskRecord
from kernos.tasks._resolve import SpawnItem, SpawnResolution, allowed_models, resolve_spawn_items
from kernos.tasks._scheduler import TaskScheduler
from kernos.tasks._state import SETTLED, Residency
from kernos.tasks._teams import Teams
from kernos.tasks._tools import task_tools


class TaskManager(ChildSessions):
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
        #: runs the children this manager builds (it asks this manager what
        #: :class:`kernos.tasks._scheduler.RunHooks` declares)
        self.scheduler = TaskScheduler(runtime, reconcile=reconcile, engine=engine, hooks=self)
        self.runtime, self.config = runtime, self.scheduler.config
        self.store, self.records = self.scheduler.store, self.scheduler.records
        #: a background child's result reaches its parent (``False``: ``kernos run --no-wait``,
        #: whose run ends at its first idle; the ``task`` answer says so)
        self.delivers_results = True
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

    # -- the scheduler's, forwarded: what the task tools (``TaskHost``), teams (``TeamHost``)
    # -- and library users reach through the manager -------------------------------------------
    def children(self, session: Session) -> list[TaskRecord]:
        return self.scheduler.children(session)

    def find(self, session: Session, key: str) -> TaskRecord | None:
        """A child of ``session`` by task id or name."""
        return self.scheduler.find(session, key)

    def queue_position(self, record: TaskRecord) -> int | None:
        return self.scheduler.queue_position(record)

    async def queued(self, records: Sequence[TaskRecord]) -> None:
        await self.scheduler.queued(records)

    async def send(self, record: TaskRecord, message: str) -> int | None:
        return await self.scheduler.send(record, message)

    def detach(self, records: Iterable[TaskRecord]) -> list[TaskRecord]:
        return self.scheduler.detach(records)

    async def wait(self, records: Iterable[TaskRecord], timeout: float | None = None) -> bool:
        """Wait until each record's current run has ended, or ``timeout`` seconds passed."""
        return await self.scheduler.wait(records, timeout)

    async def wait_all(self) -> None:
        """Wait until no child is pending or running."""
        await self.scheduler.wait_all()

    def cancel(self, record: TaskRecord, reason: str | None = None) -> bool:
        """Stop a pending or running child (no notice); ``False`` when it was not active."""
        return self.scheduler.cancel(record, reason)

    def cancel_all(self, reason: str) -> list[TaskRecord]:
        return self.scheduler.cancel_all(reason)

    def interrupt(self, record: TaskRecord) -> bool:
        return self.scheduler.interrupt(record)

    def wake(self) -> None:
        self.scheduler.wake()

    def change_event(self) -> asyncio.Event:
        return self.scheduler.change_event()

    def outstanding(self, session: Session | None = None) -> bool:
        return self.scheduler.outstanding(session)

    async def wait_change(self, session: Session | None = None) -> None:
        await self.scheduler.wait_change(session)

    async def aclose(self, *, wait: bool = True) -> None:
        """Finish: wait for every child (``wait``) or abandon the active ones as ``lost``."""
        await self.scheduler.aclose(wait=wait)

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
            self.scheduler.start(record, self._first_message(record))
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
        revived = self.scheduler.revive(record, message)
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

    # -- teams (kernos.tasks._teams), as the scheduler asks ------------------------------------
    def before_run(self, record: TaskRecord, session: Session) -> None:
        self.teams.meter(record, session)

    async def take_mail(self, record: TaskRecord, ordinal: int) -> str | None:
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
