"""``kernos demo``: the whole kernel, offline, driven by bundled cassettes.

The model turns are replayed; everything else is real: the boundary normalizes a padded
``read_file`` call (a built-in workspace tool) and the padded ``task`` calls, children run as
sessions and are recorded in a SQLite store, the batch goes through the output kernel to a file
channel, and the compress protocol writes an approved draft atomically.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kernos._app import RunOutcome, run_agent
from kernos.compress import FileReport, compress_files
from kernos.runtime import ReplayModel, Runtime, SessionEvent, load_config
from kernos.tasks import TaskStore

PROMPT = "Prepare the release audit: check the task tool boundary, then log the outcome."
DATA = "demo_data"


def _config(workspace: Path, cassette: Path) -> str:
    return f"""\
# written by `kernos demo`; point default_model at a real model to run the same for real
default_model = "replay:{cassette.as_posix()}"

[agents.main]
instructions = "You coordinate a release audit. Delegate research to sub-tasks; log outcomes."

[agents.explore]
description = "Read-only research"
instructions = "You research one question and report briefly."

[categories.quick]
description = "Small, fast checks"

[channels.log]
kind = "file"
description = "The release audit log (one JSON line per message)."
path = "{(workspace / "out" / "log.jsonl").as_posix()}"
"""


@dataclass
class DemoResult:
    """What the demo did, for the CLI to render."""

    workspace: Path
    outcome: RunOutcome
    tasks: list[dict[str, Any]]
    receipt: str
    log_lines: list[dict[str, Any]]
    compress: FileReport
    compressed_path: Path
    events: list[SessionEvent] = field(default_factory=list)


def copy_data(workspace: Path) -> dict[str, Path]:
    """Copy the bundled cassettes, prompt file and skill into the workspace."""
    copied: dict[str, Path] = {}
    layout = {
        "session.json": workspace / "session.json",
        "compress.json": workspace / "compress.json",
        "release_prompt.md": workspace / "release_prompt.md",
        "audit_skill.md": workspace / ".kernos" / "skills" / "audit" / "SKILL.md",
    }
    for name, target in layout.items():
        source = resources.files("kernos").joinpath(DATA, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        with resources.as_file(source) as path:
            shutil.copyfile(path, target)
        copied[name] = target
    return copied


async def run_demo(
    workspace: Path, on_event: Callable[[SessionEvent], None] | None = None
) -> DemoResult:
    """Run the demo in ``workspace`` (a directory it may fill): tasks, output, compress."""
    workspace.mkdir(parents=True, exist_ok=True)
    files = copy_data(workspace)
    config_path = workspace / "kernos.toml"
    config_path.write_text(_config(workspace, files["session.json"]), encoding="utf-8")
    config = load_config(config_path, cwd=workspace)
    config.home = workspace / ".kernos"
    runtime = Runtime(config)
    events: list[SessionEvent] = []

    def record(event: SessionEvent) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event)

    try:
        # the workspace tools are confined to the working directory: the demo's is the workspace
        with contextlib.chdir(workspace):
            outcome = await run_agent(runtime, PROMPT, on_event=record)
        tasks = [dict(row) for row in TaskStore(runtime.store).recent()]
    finally:
        runtime.close()
    receipt = next(
        (
            e.data["result"].text
            for e in events
            if e.kind == "tool_result" and str(e.data.get("name", "")).startswith("output_send__")
        ),
        "",
    )
    log_path = workspace / "out" / "log.jsonl"
    log_lines = (
        [json.loads(line) for line in log_path.read_text(encoding="utf-8").splitlines()]
        if log_path.exists()
        else []
    )
    compressed = workspace / "release_prompt.min.md"
    [report] = await compress_files(
        [files["release_prompt.md"]],
        model=ReplayModel(files["compress.json"]),
        out=compressed,
        agents=1,
    )
    return DemoResult(
        workspace=workspace,
        outcome=outcome,
        tasks=sorted(tasks, key=lambda t: t["created_at"]),
        receipt=receipt,
        log_lines=log_lines,
        compress=report,
        compressed_path=compressed,
        events=events,
    )
