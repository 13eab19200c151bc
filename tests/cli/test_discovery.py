"""State discovery: ``.kernos/`` and ``kernos.toml`` are found by walking up from the
working directory like ``.git``; ``KERNOS_HOME`` still wins; ``-v`` names the store used."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from kernos.runtime import Store, kernos_home, project_root
from kernos.tasks import TaskStore
from tests import _cli


def kernos(*args: str, cwd: Path, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KERNOS_HOME"}
    if home is not None:
        env["KERNOS_HOME"] = str(home)
    return _cli.kernos(*args, cwd=cwd, env=env, timeout=60)


def seed_task(home: Path) -> None:
    tasks = TaskStore(Store.open(home))
    row = {"id": "t_0000cafe", "parent_session": "s_1", "target_kind": "agent",
           "target": "explore", "model": "openai-chat:test", "status": "completed",
           "residency": "disposed", "label": "survey", "created_at": time.time()}  # fmt: skip
    tasks.insert(row)
    tasks.store.close()


def test_project_root_is_the_nearest_directory_with_state_or_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KERNOS_HOME")
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    assert project_root(deep) == deep  # nothing above: the working directory itself
    (tmp_path / "kernos.toml").write_text("")
    assert project_root(deep) == tmp_path
    (tmp_path / "a" / ".kernos").mkdir()
    assert project_root(deep) == tmp_path / "a"  # the nearest wins
    assert kernos_home(deep) == (tmp_path / "a" / ".kernos").resolve()
    monkeypatch.setenv("KERNOS_HOME", str(tmp_path / "elsewhere"))
    assert kernos_home(deep) == (tmp_path / "elsewhere").resolve()


def test_a_subdirectory_sees_the_parent_projects_tasks_and_config(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[channels.log]\nkind = "file"\npath = "out/log.jsonl"\ndescription = "Audit log."\n'
    )
    seed_task(tmp_path / ".kernos")
    sub = tmp_path / "src" / "pkg"
    sub.mkdir(parents=True)
    listed = kernos("-v", "tasks", "list", "--json", cwd=sub)
    assert listed.returncode == 0, listed.stderr
    assert [t["id"] for t in json.loads(listed.stdout)["tasks"]] == ["t_0000cafe"]
    store = (tmp_path / ".kernos" / "kernos.db").resolve()
    assert listed.stderr.startswith(f"store: {store} (found in {tmp_path});")
    assert f"config: {tmp_path / 'kernos.toml'}" in listed.stderr
    assert not (sub / ".kernos").exists()
    channels = json.loads(kernos("channels", "--json", cwd=sub).stdout)
    assert [c["name"] for c in channels["channels"]] == ["log"]
    sent = kernos("send", "log", "hello", cwd=sub)
    assert sent.returncode == 0, sent.stderr
    assert (tmp_path / "out" / "log.jsonl").exists()  # paths are the project's, not the subdir's


def test_kernos_home_wins_and_a_fresh_directory_gets_its_own_store(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    seed_task(project / ".kernos")
    other = tmp_path / "other-home"
    listed = kernos("-v", "tasks", "list", cwd=project / "sub", home=other)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "(no tasks)\n"
    assert listed.stderr.startswith(f"store: {other.resolve() / 'kernos.db'} (KERNOS_HOME);")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    made = kernos("-v", "tasks", "list", cwd=fresh)
    assert made.stdout == "(no tasks)\n"
    assert "(the working directory; created on first use)" in made.stderr
    assert (fresh / ".kernos" / "kernos.db").exists()
