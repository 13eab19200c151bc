"""A model alias's unset ``${VAR}`` fails only the commands that use that model."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests import _cli

CONFIG = """
[models.fast]
model = "openai-chat:x"
base_url = "${KERNOS_TEST_UNSET_URL}"

[channels.log]
kind = "file"
path = "out/log.jsonl"
"""


def kernos(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KERNOS_TEST_UNSET_URL"}
    env["KERNOS_HOME"] = str(cwd / ".kernos")
    return _cli.kernos(*args, cwd=cwd, env=env, timeout=60)


def test_commands_without_a_model_ignore_an_alias_with_an_unset_variable(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    for args in (["channels"], ["tasks", "list"], ["send", "log", "hi"], ["usage"]):
        done = kernos(*args, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
    run = kernos("run", "hi", "-m", "fast", cwd=tmp_path)
    assert run.returncode == 2
    assert "models.fast.base_url: environment variable KERNOS_TEST_UNSET_URL" in run.stderr
    assert "export KERNOS_TEST_UNSET_URL=..." in run.stderr


def test_an_unset_variable_outside_models_is_still_exit_2(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[channels.log]\nkind = "file"\npath = "${KERNOS_TEST_UNSET_URL}"\n', encoding="utf-8"
    )
    done = kernos("channels", cwd=tmp_path)
    assert done.returncode == 2
    assert "environment variable KERNOS_TEST_UNSET_URL is not set" in done.stderr
