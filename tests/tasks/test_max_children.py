"""``[tasks] max_children`` caps the children one run starts (its root session and every
descendant, each ``task_send`` revival too): past it ``task`` answers ``too_many_children`` and a
batch that would pass it spawns nothing (README, "Bounds")."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from tasks_helpers import agent_is, messages

from kernos.boundary import ToolContext, call_tool
from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager
from kernos.testing import FakeOpenAIServer, text, tool_calls

KERNOS = str(Path(sys.executable).with_name("kernos"))

FANOUT = """
default_model = "openai-chat:test"

[agents.main]
instructions = "MAIN-AGENT: you coordinate."
max_turns = 2

[categories.quick]
instructions = "QUICK-WORKER: you edit."

[tasks]
max_turns = 1
max_children = 20
"""


@pytest.mark.parametrize("engine", ["local", "dbos"])
def test_five_parallel_batches_of_16_start_at_most_max_children(
    server: FakeOpenAIServer, tmp_path: Path, engine: str
) -> None:
    (tmp_path / "kernos.toml").write_text(FANOUT, encoding="utf-8")
    batch = {"category": "quick", "tasks": [{"prompt": f"item {n}"} for n in range(16)]}
    server.script(
        tool_calls(*[("task", batch)] * 5, when=agent_is("MAIN-AGENT", "fan out")),
        text("child done", when=agent_is("QUICK-WORKER"), repeat=True),
        text("all done", when=agent_is("MAIN-AGENT")),
    )
    env = {
        **os.environ,
        **server.env(),
        "KERNOS_HOME": str(tmp_path / ".kernos"),
        "KERNOS_TASK_ENGINE": engine,
    }
    done = subprocess.run(
        [KERNOS, "run", "fan out"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = subprocess.run(
        [KERNOS, "tasks", "list", "--json"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    tasks = json.loads(listed.stdout)["tasks"]
    assert len(tasks) == 16  # one batch of 16; the next would pass 20, so it started none
    with closing(sqlite3.connect(tmp_path / ".kernos" / "kernos.db")) as db:
        engines = [row[0] for row in db.execute("SELECT DISTINCT engine FROM tasks")]
    assert engines == [engine]
    main = [r for r in server.requests if agent_is("MAIN-AGENT")(r)]
    assert len(main) == 2 and len(server.requests) == 2 + 16
    results = [str(m["content"]) for m in messages(main[-1]) if m.get("role") == "tool"]
    refused = [r for r in results if r.startswith("Too many child tasks")]
    assert len(refused) == 4
    assert refused[0] == (
        "Too many child tasks: this run may start 20 (task_send revivals count too) and has "
        "started 16; this call would start 16 more, so nothing was spawned. Do the remaining "
        "work yourself."
    )


async def test_a_revival_counts_against_the_cap(project: Path, server: FakeOpenAIServer) -> None:
    toml = project / "kernos.toml"
    toml.write_text(toml.read_text().replace("[tasks]\n", "[tasks]\nmax_children = 2\n"))
    runtime = Runtime(load_config(cwd=project))
    server.script(text("child done", repeat=True))
    manager = TaskManager(runtime)
    session = runtime.session("main", record_turns=False)
    session.add_tools(manager.tools_for(session))

    async def call(tool: str, args: dict[str, Any]) -> Any:
        return await call_tool(session.tools[tool], args, ToolContext(session=session))

    first = await call("task", {"prompt": "a", "category": "quick", "name": "a"})
    assert not first.is_error, first.text
    assert (await call("task_send", {"to": "a", "message": "again"})).text.startswith("Revived")
    (record,) = manager.records.values()
    await manager.wait([record])
    refused = await call("task_send", {"to": "a", "message": "once more"})
    assert refused.code == "too_many_children"
    assert f"{record.id} was not revived" in refused.text
    assert record.run_epoch == 2
    spawn = await call("task", {"prompt": "b", "category": "quick"})
    assert spawn.code == "too_many_children" and len(manager.records) == 1
    await manager.aclose(wait=True)
    runtime.close()
