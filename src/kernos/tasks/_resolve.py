"""Semantic validation of ``task`` calls: from normalized arguments to spawn items.

Pure: the configured targets and the caller's grantable tools come in as plain arguments. Every
rejection is a coded :class:`kernos.boundary.ToolError` whose message tells the model what to fix;
a faulty batch is rejected as a whole, listing every faulty item, and nothing spawns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from kernos.boundary import ToolError, non_blank_text

#: The most items one ``tasks`` batch may carry.
MAX_BATCH = 16

INVALID_ARGUMENTS = "invalid_arguments"

MSG_PROMPT_AND_TASKS = "Provide EITHER prompt OR tasks, not both. Remove one and retry."
MSG_NO_PROMPT_OR_TASKS = "Provide EITHER prompt OR tasks. One field is required."
MSG_EMPTY_TASKS = "tasks must contain at least one item."
MSG_TOO_MANY_TASKS = f"tasks supports at most {MAX_BATCH} items."
MSG_BOTH_TARGETS = "Provide EITHER category OR subagent_type, not both. Remove one and retry."

#: The longest ``name`` a child may have (as long as a clamped ``task_summary``).
NAME_MAX = 80
#: The longest ``description`` a child may have.
DESCRIPTION_MAX = 200
#: How much of an over-long or refused value a message shows.
_SHOWN = 40

#: Model strings that read a file (a cassette): never accepted from a model, whatever it names.
FILE_SCHEMES = ("replay:",)


# -- the schema (what survives normalization) ----------------------------------------------------


class TaskItemArgs(BaseModel):
    """One ``tasks`` entry after normalization; ``prompt`` is ``""`` when the entry had none."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = ""
    task_summary: str | None = None
    description: str | None = None
    category: str | None = None
    subagent_type: str | None = None
    name: str | None = None
    model: str | None = None
    load_skills: list[str] | None = None
    run_in_background: bool | None = None
    team: str | None = None


class TaskArgs(BaseModel):
    """The ``task`` tool's parameters; every field optional (presence rules are semantic)."""

    model_config = ConfigDict(extra="forbid")

    prompt: str | None = None
    tasks: list[TaskItemArgs] | None = None
    description: str | None = None
    task_summary: str | None = None
    category: str | None = None
    subagent_type: str | None = None
    model: str | None = None
    load_skills: list[str] | None = None
    tools: list[str] | None = None
    run_in_background: bool | None = None
    name: str | None = None
    team: str | None = None


def task_json_schema() -> dict[str, Any]:
    """The schema the model sees: :class:`TaskArgs` with the batch cap stated."""
    schema = TaskArgs.model_json_schema()
    tasks = schema["properties"]["tasks"]
    for option in tasks.get("anyOf", [tasks]):
        if option.get("type") == "array":
            option["maxItems"] = MAX_BATCH
    return schema


# -- results -------------------------------------------------------------------------------------


@dataclass(slots=True)
class SpawnItem:
    """One child to spawn, with inheritance applied."""

    prompt: str
    category: str | None = None
    subagent_type: str | None = None
    model: str | None = None
    load_skills: list[str] = field(default_factory=list)
    task_summary: str | None = None
    description: str | None = None
    name: str | None = None
    #: the team the child joins (``kernos.tasks._teams``): per item, else the top level's
    team: str | None = None

    @property
    def target_kind(self) -> Literal["category", "agent"]:
        return "category" if self.category is not None else "agent"

    @property
    def target(self) -> str:
        return self.category or self.subagent_type or ""

    @property
    def label(self) -> str:
        """What people and the model call this child: summary, description, name, or the prompt."""
        label = self.task_summary or self.description or self.name
        if label:
            return label
        first = " ".join(self.prompt.split())
        return first if len(first) <= 48 else first[:45] + "..."

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


@dataclass(slots=True)
class SpawnResolution:
    """``kind == "ok"`` with ``items`` (and the batch-wide ``background`` flag), or
    ``kind == "error"`` with ``code`` and ``message``."""

    kind: Literal["ok", "error"]
    items: list[SpawnItem] = field(default_factory=list)
    background: bool = False
    batch: bool = False
    tools: list[str] = field(default_factory=list)
    code: str | None = None
    message: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> ToolError | None:
        if self.kind != "error":
            return None
        return ToolError(self.code or "", self.message or "", self.details)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


@dataclass(slots=True)
class BackgroundResolution:
    """``kind == "ok"`` with ``value`` (the one defined value, or ``None``), or a conflict."""

    kind: Literal["ok", "error"]
    value: bool | None = None
    code: str | None = None
    message: str | None = None
    seen: list[bool] = field(default_factory=list)

    @property
    def background(self) -> bool:
        """Only an explicit ``true`` means background."""
        return self.value is True


# -- helpers -------------------------------------------------------------------------------------


def _fields(source: Any) -> dict[str, Any]:
    """A read-only field view of a dict or a pydantic model, without copying either."""
    if type(source) is dict:
        return source
    # the schema's own models first: pydantic's metaclass makes ``isinstance`` comparatively slow
    if type(source) is TaskArgs or type(source) is TaskItemArgs or isinstance(source, BaseModel):
        return source.__dict__
    if isinstance(source, Mapping):
        return dict(source)
    return {}


def _names(value: Mapping[str, Any] | Iterable[str] | None) -> Sequence[str] | None:
    if value is None or type(value) is tuple:
        return value
    return tuple(sorted(value))


def _error(code: str, message: str, **details: Any) -> SpawnResolution:
    details = {"code": code, "status": INVALID_ARGUMENTS, **details}
    return SpawnResolution("error", [], False, False, [], code, message, details)


def clip_shown(value: str) -> str:
    """``value`` as a message quotes it: at most a short prefix (a model may send megabytes)."""
    return value if len(value) <= _SHOWN else value[: _SHOWN - 3] + "..."


def allowed_models(aliases: Iterable[str], parent_model: str | None) -> tuple[str, ...]:
    """The models a ``task`` call may name for a child: the configured aliases
    (``[models.NAME]``) and the caller's own model string, never a file-reading one
    (``replay:``). Everything else comes from configuration, not from the model."""
    names = set(aliases)
    if parent_model:
        names.add(parent_model)
    return tuple(sorted(n for n in names if not n.startswith(FILE_SCHEMES)))


def _model_ok(model: str | None, models: Sequence[str] | None) -> bool:
    return model is None or models is None or model in models


def _models_listing(models: Sequence[str] | None) -> str:
    shown = ", ".join(models) if models else "(none)"
    return (
        f"Allowed models: {shown}. Or leave model out: the child then runs on its agent's "
        "configured model."
    )


def _listing(names: Sequence[str] | None) -> str:
    if names is None:
        return "(not known here)"
    return ", ".join(names) if names else "(none configured)"


def _available(categories: Sequence[str] | None, agents: Sequence[str] | None) -> str:
    return f"Available categories: {_listing(categories)}. Available agents: {_listing(agents)}."


def _example(categories: Sequence[str] | None, agents: Sequence[str] | None) -> str:
    category = categories[0] if categories else "CATEGORY"
    agent = agents[0] if agents else "AGENT"
    return (
        f'For example {{"category": "{category}", "prompt": "..."}} runs a {category} worker; '
        f'{{"subagent_type": "{agent}", "prompt": "..."}} runs the {agent} agent.'
    )


# -- run_in_background ---------------------------------------------------------------------------


def _background_values(top: dict[str, Any], items: Iterable[dict[str, Any]]) -> list[bool]:
    """The distinct defined values, in order; ``items`` are field views (see :func:`_fields`)."""
    seen: list[bool] = []
    value = top.get("run_in_background")
    if value is not None:
        seen.append(value)
    for item in items:
        value = item.get("run_in_background")
        if value is not None and value not in seen:
            seen.append(value)
    return seen


def _conflict_message(seen: Sequence[bool]) -> str:
    shown = ", ".join(json.dumps(v) for v in seen)
    return (
        "run_in_background applies to the whole batch: set it once at the top level "
        f"and remove it from the items. Values seen: {shown}."
    )


def resolve_run_in_background(params: Any) -> BackgroundResolution:
    """The batch-wide flag: the distinct defined values among the top level and the items.

    More than one distinct value is ``run_in_background_conflict``; only ``true`` means background.
    """
    top = _fields(params)
    seen = _background_values(top, [_fields(item) for item in top.get("tasks") or ()])
    if len(seen) > 1:
        return BackgroundResolution(
            kind="error",
            code="run_in_background_conflict",
            message=_conflict_message(seen),
            seen=seen,
        )
    return BackgroundResolution(kind="ok", value=seen[0] if seen else None, seen=seen)


# -- targets -------------------------------------------------------------------------------------


def _target_ok(
    item: SpawnItem,
    categories: Sequence[str] | None,
    agents: Sequence[str] | None,
    models: Sequence[str] | None = None,
) -> bool:
    """``not _target_faults(item, ...)``, without building the faults: the common, valid case."""
    if item.category is not None:
        return (
            item.subagent_type is None
            and item.model is None
            and (categories is None or item.category in categories)
        )
    return (
        item.subagent_type is not None
        and (agents is None or item.subagent_type in agents)
        and _model_ok(item.model, models)
    )


def _label_faults(item: SpawnItem) -> list[tuple[str, str, str]]:
    """``(code, field, reason)`` for a ``name`` or ``description`` over its bound."""
    faults: list[tuple[str, str, str]] = []
    if item.name is not None and len(item.name) > NAME_MAX:
        faults.append(("name_too_long", "name", f"is over {NAME_MAX} characters"))
    if item.description is not None and len(item.description) > DESCRIPTION_MAX:
        faults.append(
            ("description_too_long", "description", f"is over {DESCRIPTION_MAX} characters")
        )
    return faults


def _labels_ok(item: SpawnItem) -> bool:
    return (item.name is None or len(item.name) <= NAME_MAX) and (
        item.description is None or len(item.description) <= DESCRIPTION_MAX
    )


def _target_faults(
    item: SpawnItem,
    categories: Sequence[str] | None,
    agents: Sequence[str] | None,
    models: Sequence[str] | None = None,
) -> list[tuple[str, str, str]]:
    """``(code, field, reason)`` for each target rule the item breaks."""
    if item.category is not None and item.subagent_type is not None:
        return [("both_targets", "category", "give category or subagent_type, not both")]
    if item.category is None and item.subagent_type is None:
        return [("no_target", "category", "one of category or subagent_type is required")]
    faults: list[tuple[str, str, str]] = []
    if item.category is not None:
        if categories is not None and item.category not in categories:
            faults.append(
                (
                    "unknown_target",
                    "category",
                    f'"{clip_shown(item.category)}" is not a configured category',
                )
            )
        if item.model is not None:
            faults.append(
                ("category_with_model", "model", "a category's model comes from its config")
            )
    else:
        if agents is not None and item.subagent_type not in agents:
            faults.append(
                (
                    "unknown_target",
                    "subagent_type",
                    f'"{clip_shown(item.subagent_type or "")}" is not a configured agent',
                )
            )
        if not _model_ok(item.model, models):
            faults.append(
                (
                    "model_not_allowed",
                    "model",
                    f'"{clip_shown(item.model or "")}" is not an allowed model',
                )
            )
    return faults


def _single_error(
    code: str,
    item: SpawnItem,
    categories: Sequence[str] | None,
    agents: Sequence[str] | None,
    models: Sequence[str] | None = None,
) -> SpawnResolution:
    if code == "both_targets":
        return _error(code, MSG_BOTH_TARGETS)
    if code == "no_target":
        return _error(
            code,
            "Each spawn needs exactly one of category or subagent_type. "
            + _example(categories, agents),
        )
    if code == "category_with_model":
        return _error(
            code,
            f'Category "{item.category}" takes its model from the category\'s config, so model '
            "cannot be set with it. Drop model, or use subagent_type to pick the model.",
        )
    if code == "model_not_allowed":
        return _error(
            code,
            f'The model "{clip_shown(item.model or "")}" cannot be chosen for a child task; '
            "nothing was spawned. " + _models_listing(models),
            allowed=list(models or ()),
        )
    if code in ("name_too_long", "description_too_long"):
        return _label_error(code)
    kind = "category" if item.category is not None else "agent"
    return _error(
        code,
        f'Unknown {kind} "{clip_shown(item.target)}". ' + _available(categories, agents),
        target=clip_shown(item.target),
    )


def _label_error(code: str) -> SpawnResolution:
    if code == "name_too_long":
        return _error(
            code,
            f"name is longer than {NAME_MAX} characters; nothing was spawned. Give a short "
            "handle (a few words joined by '-') and retry.",
        )
    return _error(
        code,
        f"description is longer than {DESCRIPTION_MAX} characters; nothing was spawned. Give a "
        "short note for people; the instruction goes in prompt.",
    )


def _inherit(item: dict[str, Any], top: dict[str, Any]) -> SpawnItem:
    category = item.get("category")
    subagent_type = item.get("subagent_type")
    if category is None and subagent_type is None:
        category = top.get("category")
        subagent_type = top.get("subagent_type")
    skills = item.get("load_skills") or top.get("load_skills")
    return SpawnItem(
        item.get("prompt") or "",
        category,
        subagent_type,
        item.get("model") or top.get("model"),
        list(skills) if skills else [],
        item.get("task_summary"),
        item.get("description"),
        item.get("name"),
        item.get("team") or top.get("team"),
    )


def resolve_spawn_items(
    params: Any,
    *,
    categories: Mapping[str, Any] | Iterable[str] | None = None,
    agents: Mapping[str, Any] | Iterable[str] | None = None,
    tools: Mapping[str, Any] | Iterable[str] | None = None,
    config: Any = None,
    models: Iterable[str] | None = None,
) -> SpawnResolution:
    """Validate normalized ``task`` arguments and resolve the children to spawn.

    Args:
        params: the normalized arguments (a dict from :func:`normalize_task_arguments`, or
            :class:`TaskArgs`).
        categories: configured category names (``None``: not checked).
        agents: configured agent names (``None``: not checked).
        tools: names the caller may grant (``None``: not checked).
        config: a :class:`kernos.runtime.Config`; fills ``categories``/``agents`` when omitted.
        models: the model strings an item's ``model`` may name (``None``: not checked); see
            :func:`allowed_models`.

    Order: batch shape, then ``run_in_background``, then per-item targets, then tool grants.
    This runs on every ``task`` call: the valid case is checked with cheap tests, and the faults
    (with their messages) are only worked out once something is known to be wrong.
    """
    if config is not None:
        categories = config.categories if categories is None else categories
        agents = config.agents if agents is None else agents
    # the usual tuples skip the call: ``_names`` would return them as they are
    category_names: Sequence[str] | None = (
        categories if type(categories) is tuple else _names(categories)
    )
    agent_names: Sequence[str] | None = agents if type(agents) is tuple else _names(agents)
    model_names: Sequence[str] | None = (
        None if models is None else models if type(models) is tuple else tuple(models)
    )
    top = _fields(params)

    # a blank prompt is no prompt, whether or not normalization ran first
    prompt = non_blank_text(top.get("prompt"))
    tasks = top.get("tasks")
    if tasks is None:
        if not prompt:
            return _error("no_prompt_or_tasks", MSG_NO_PROMPT_OR_TASKS)
        # the single spawn, built from the top level: ``_inherit(top, top)`` without the second
        # lookups, which would find the same values; its only background value is its own
        background = top.get("run_in_background")
        skills = top.get("load_skills")
        item = SpawnItem(
            prompt,
            top.get("category"),
            top.get("subagent_type"),
            top.get("model"),
            list(skills) if skills else [],
            top.get("task_summary"),
            top.get("description"),
            top.get("name"),
            top.get("team"),
        )
        if not _target_ok(item, category_names, agent_names, model_names):
            faults = _target_faults(item, category_names, agent_names, model_names)
            return _single_error(faults[0][0], item, category_names, agent_names, model_names)
        if not _labels_ok(item):
            return _label_error(_label_faults(item)[0][0])
        items = [item]
    else:
        if prompt:
            return _error("prompt_and_tasks", MSG_PROMPT_AND_TASKS)
        if not tasks:
            return _error("empty_tasks", MSG_EMPTY_TASKS)
        if len(tasks) > MAX_BATCH:
            return _error("too_many_tasks", MSG_TOO_MANY_TASKS)
        views = [_fields(entry) for entry in tasks]  # each entry's fields, looked up once
        seen = _background_values(top, views)
        if len(seen) > 1:
            return _error("run_in_background_conflict", _conflict_message(seen), seen=seen)
        background = seen[0] if seen else None
        items = []
        valid = True
        for view in views:
            item = _inherit(view, top)
            valid = (
                valid
                and bool(item.prompt.strip())
                and _target_ok(item, category_names, agent_names, model_names)
                and _labels_ok(item)
            )
            items.append(item)
        if not valid:
            rejection = _batch_rejection(items, category_names, agent_names, model_names)
            if rejection is not None:
                return rejection

    grants = top.get("tools")
    if tools is not None and grants:
        grantable = _names(tools) or ()
        missing = [clip_shown(name) for name in grants if name not in grantable][:_SHOWN]
        if missing:
            shown = ", ".join(f'"{name}"' for name in missing)
            return _error(
                "kernel_tool_missing",
                f"tools names {shown}, which is not one of your tools, so it cannot be granted; "
                f"nothing was spawned. Grantable tools: {', '.join(grantable) or '(none)'}.",
                missing=missing,
            )
    return SpawnResolution(
        "ok",
        items,
        background is True,
        tasks is not None and len(items) > 1,
        list(grants) if grants else [],
        None,
        None,
        {},
    )


def _batch_rejection(
    items: Sequence[SpawnItem],
    categories: Sequence[str] | None,
    agents: Sequence[str] | None,
    models: Sequence[str] | None = None,
) -> SpawnResolution | None:
    """Every faulty item of a batch in one ``invalid_items`` error; ``None`` when all are fine."""
    invalid: list[str] = []
    codes: list[dict[str, Any]] = []
    mention_targets = mention_models = False
    for index, item in enumerate(items, start=1):
        faults = _target_faults(item, categories, agents, models) + _label_faults(item)
        if not item.prompt.strip():
            faults.insert(0, ("missing_prompt", "prompt", "is blank; write the instruction"))
        if faults:
            reasons = "; ".join(f"{where}: {why}" for _, where, why in faults)
            invalid.append(f"item {index} ({reasons})")
            codes.append({"item": index, "codes": [code for code, _, _ in faults]})
            mention_targets = mention_targets or any(
                code in ("no_target", "unknown_target") for code, _, _ in faults
            )
            mention_models = mention_models or any(
                code == "model_not_allowed" for code, _, _ in faults
            )
    if not invalid:
        return None
    message = (
        f"Rejected {len(invalid)} of {len(items)} task items; nothing was spawned. "
        f"Fix and resubmit the whole batch. Invalid: {'; '.join(invalid)}."
    )
    if mention_targets:
        message += " " + _available(categories, agents)
    if mention_models:
        message += " " + _models_listing(models)
    return _error("invalid_items", message, items=codes)
