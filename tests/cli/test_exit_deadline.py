"""A ``kernos`` process ends soon after its command, whatever the command left behind: a thread
the interpreter would wait for is named in ``kernos.log`` and left, with the command's exit code;
an exit hook that blocks is cut by the deadline, every thread's stack in the log and exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: ``kernos --version`` left with something that never ends: argv[1] says what, argv[2] is the
#: home of the log ("" for none)
LEFT_BEHIND = """
import atexit, sys, threading
from pathlib import Path
from kernos.cli import _exit, main
from kernos.cli._common import enable_file_log

_exit.EXIT_DEADLINE, _exit.THREAD_GRACE = 1.0, 0.5
what, home = sys.argv[1:3]
if home:
    enable_file_log(Path(home))
if what == "exit-hook":
    atexit.register(threading.Event().wait)
else:
    threading.Thread(target=threading.Event().wait, name="left-behind").start()
sys.argv = ["kernos", "--version"]
main()
"""


def run(what: str, home: Path | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LEFT_BEHIND, what, str(home or "")], capture_output=True,
        text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip


def test_a_thread_left_running_is_named_in_the_log_and_the_exit_code_is_the_commands(
    tmp_path: Path,
) -> None:
    done = run("thread", tmp_path)
    assert done.returncode == 0
    assert done.stdout.startswith("kernos ")
    log = (tmp_path / "kernos.log").read_text(encoding="utf-8")
    assert "1 thread(s) still running 0.5 s after the command ended" in log
    assert "thread left-behind:" in log
    assert "in wait" in log  # where it was


def test_an_exit_hook_that_blocks_is_cut_with_every_stack_in_the_log(tmp_path: Path) -> None:
    done = run("exit-hook", tmp_path)
    assert done.returncode == 1
    assert done.stdout.startswith("kernos ")  # the command's own output went out first
    log = (tmp_path / "kernos.log").read_text(encoding="utf-8")
    assert "Timeout (0:00:01)!" in log
    assert "in wait" in log  # where it was stuck: the exit hook's wait
    assert "Timeout" not in done.stderr


def test_without_a_log_the_stacks_go_to_stderr() -> None:
    done = run("exit-hook", None)
    assert done.returncode == 1
    assert "Timeout (0:00:01)!" in done.stderr
