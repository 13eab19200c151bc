"""``kernos mcp`` usage and configuration mistakes: one stderr line and exit 2, before serving."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests import _cli


def run(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KERNOS_MODEL", "OPENAI_API_KEY")}
    env.update(extra)
    return _cli.kernos(
        "mcp",
        *args,
        cwd=cwd,
        env={**env, "KERNOS_HOME": str(cwd / ".kernos")},
        input="",
        timeout=60,
    )


def test_no_model_still_starts_with_the_how_to_line_on_stderr(tmp_path: Path) -> None:
    # hosts hide a server's stderr: the server starts, and task/compress answer the error
    # (tests/serve/test_no_model.py)
    result = run(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "no model configured: pass --model, set KERNOS_MODEL" in result.stderr
    assert result.stdout == ""  # stdout is the protocol's: nothing else is ever written there


def test_an_unknown_agent_and_bad_flags_are_exit_2(project: Path) -> None:
    unknown = run("--agent", "nobody", cwd=project)
    assert unknown.returncode == 2
    assert "nobody" in unknown.stderr
    bad_wait = run("--foreground-wait", "0", cwd=project)
    assert bad_wait.returncode == 2
    assert "--foreground-wait must be a positive number of seconds" in bad_wait.stderr
    bad_http = run("--http", "localhost", cwd=project)
    assert bad_http.returncode == 2
    assert "--http 'localhost' is not HOST:PORT" in bad_http.stderr


def test_stdin_closed_at_once_is_a_clean_exit(project: Path) -> None:
    result = run(cwd=project, OPENAI_API_KEY="k", OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
