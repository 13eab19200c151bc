"""Shell completion: typer's ``--install-completion`` / ``--show-completion``, with
the shell named or detected, and the completions the script asks ``kernos`` for."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import _cli


def kernos(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _cli.kernos(*args, env={**os.environ, **(env or {})}, timeout=60)


@pytest.mark.parametrize(
    ("shell", "start"),
    [("bash", "_kernos_completion() {"), ("zsh", "#compdef kernos"), ("fish", "complete ")],
)
def test_show_completion_prints_the_shells_script(shell: str, start: str) -> None:
    done = kernos("--show-completion", shell)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(start)
    assert "_KERNOS_COMPLETE" in done.stdout


def test_install_completion_writes_the_script(tmp_path: Path) -> None:
    done = kernos("--install-completion", "bash", env={"HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".bash_completions" / "kernos.sh"
    assert "_kernos_completion" in script.read_text()
    assert str(script) in (tmp_path / ".bashrc").read_text()


def test_the_options_are_in_the_help() -> None:
    shown = kernos("--help").stdout
    assert "--install-completion" in shown and "--show-completion" in shown


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [
        ("kernos ta", "1", "tasks"),
        ("kernos config ", "2", "check"),
        ("kernos run --tim", "2", "--timeout"),
    ],
)
def test_the_script_completes_commands_and_options(words: str, cword: str, expected: str) -> None:
    env = {"_KERNOS_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": cword}
    done = kernos(env=env)
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout.split()
