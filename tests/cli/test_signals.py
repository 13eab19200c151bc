"""SIGINT and SIGTERM on a real `kernos run` with a background child still running: one line on
stderr, the child recorded ``cancelled`` (not ``lost`` or ``completed``), exit 130 / 143."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests import _cli
from tests._agents import CONFIG, SPAWN, agent_is
from tests._wait import wait_for
from tests.conftest import KERNOS


def status_of_children(home: Path) -> list[str]:
    try:
        with sqlite3.connect(home / "kernos.db") as db:
            return [row[0] for row in db.execute("SELECT status FROM tasks")]
    except sqlite3.OperationalError:
        return []


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_cancels_the_children_and_exits(
    server: FakeOpenAIServer, gate: threading.Event, tmp_path: Path, signum: int, code: int
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    server.script(
        tool_call("task", SPAWN, when=agent_is("MAIN-AGENT")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT")),
        text("never delivered", when=agent_is("EXPLORE-AGENT"), hold=gate),
    )
    home = tmp_path / ".kernos"
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(home)}
    proc = subprocess.Popen(
        [KERNOS, "run", "survey it", "-q"], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(
            lambda: status_of_children(home) == ["running"], "the child to start", alive=[proc]
        )
        proc.send_signal(signum)
        out, errors = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, errors
    name = signal.Signals(signum).name
    assert errors.splitlines() == [f"{name} received: cancelling running tasks and stopping"]
    assert out == ""
    assert status_of_children(home) == ["cancelled"]
    listed = _cli.kernos("tasks", "list", "--json", cwd=tmp_path, env=env, timeout=60)
    (task,) = json.loads(listed.stdout)["tasks"]
    assert (task["status"], task["residency"]) == ("cancelled", "disposed")
    shown = _cli.kernos("tasks", "output", task["id"], cwd=tmp_path, env=env, timeout=60)
    assert "[status] running → cancelled (run epoch 1) — the run was interrupted" in shown.stdout
