"""``kernos worker`` on a real PostgreSQL: the children it executes record their usage (every
model request the server received is in ``kernos usage``), and it says on stderr when it takes a
child and when the child ends (``-q``: it does not)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from tasks_helpers import agent_is
from test_dbos_postgres import KERNOS
from tests.conftest import Worker

from kernos.testing import FakeOpenAIServer, text, tool_call

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

CHILD = {"prompt": "List the files.", "subagent_type": "explore", "name": "lister",
         "run_in_background": False}  # fmt: skip


def test_a_workers_children_record_their_usage_and_the_worker_says_what_it_runs(
    project: Path,
    server: FakeOpenAIServer,
    fresh_postgres_url: str,
    worker: Callable[..., Worker],
) -> None:
    with (project / "kernos.toml").open("a", encoding="utf-8") as config:
        config.write("run_executes = false\nheartbeat = 0.5\n")
    server.script(
        tool_call("task", CHILD, when=agent_is("MAIN-AGENT", role="user"), repeat=True),
        tool_call(
            "list_files", {"path": "."}, when=agent_is("EXPLORE-AGENT", role="user"), repeat=True
        ),
        text("two files", when=agent_is("EXPLORE-AGENT", role="tool"), repeat=True),
        text("Listed.", when=agent_is("MAIN-AGENT", role="tool"), repeat=True),
    )
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(project / ".kernos"),
           "KERNOS_STORE_URL": fresh_postgres_url}  # fmt: skip
    env.pop("KERNOS_TASK_ENGINE", None)  # auto: DBOS, since the store is PostgreSQL

    def kernos(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [KERNOS, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return done

    said: dict[str, list[str]] = {}
    for flags in ((), ("-q",)):
        started = worker(project, env, *flags)
        started.wait_line("executing")
        assert kernos("run", "list them", "-q").stdout == "Listed.\n"
        said[" ".join(flags)] = started.stop()
    assert len(server.requests) == 8  # per run: parent 2, child 2 (on a worker)
    document = json.loads(kernos("usage", "--by", "agent", "--json").stdout)
    groups = {g["agent"]: g["requests"] for g in document["groups"]}
    assert groups == {"main": 4, "explore": 4}, document
    took = [line for line in said[""] if " took " in line]
    ended = [line for line in said[""] if " ended " in line]
    assert len(took) == 1 and len(ended) == 1, said[""]
    assert re.fullmatch(r"worker \S+ took t_[0-9a-f]{8} \(lister\) on openai-chat:test", took[0])
    assert re.fullmatch(
        r"worker \S+ ended t_[0-9a-f]{8} \(lister\) on openai-chat:test: completed after \S+s",
        ended[0],
    )
    assert not [line for line in said["-q"] if " took " in line or " ended " in line]
