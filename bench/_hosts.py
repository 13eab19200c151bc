"""Emulated hosts for the benchmarks: processes each confined to a CPU quota of its own.

:class:`CpuHosts` creates ``count`` cgroups under the cgroup v1 cpu controller
(``/sys/fs/cgroup/cpu/kbench<pid>h<i>``), each with a CFS quota of ``cores`` CPUs
(``cpu.cfs_quota_us`` = ``cores`` × ``cpu.cfs_period_us``, the period 100 ms): host ``i`` is a
machine of ``cores`` CPUs of its own. :meth:`CpuHosts.wrap` prefixes an argv with a tiny shell
that writes its own pid into the cgroup's ``cgroup.procs`` and then execs the argv, so the
process (same pid) runs inside its host from its first instruction, before it imports anything.

Every name is ``kbench<pid>h<i>``, ``<pid>`` the creating process: :meth:`CpuHosts.start` first
removes those whose creating pid is dead (a SIGKILLed bench leaves them behind), killing what
still runs inside; :meth:`CpuHosts.stop` kills what is left in its own cgroups and removes them
(``rmdir`` once empty). Both ignore what is already gone; ``stop`` is safe to call twice.

Needs root and a writable cgroup v1 cpu controller: otherwise :class:`HostsUnavailable` says
why in one line.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000
_OURS = re.compile(r"^kbench(\d+)h\d+$")
# $$ is the shell's pid, kept by exec: the argv runs inside the cgroup from its start
_WRAPPER = 'echo $$ > "$0" && exec "$@"'


class HostsUnavailable(Exception):
    """CPU-quota hosts cannot be created here (the message says why, in one line)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pids(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (FileNotFoundError, ValueError):
        return []


def _empty_and_remove(group: Path) -> None:
    """SIGKILL what runs in ``group`` (a process that was not stopped in time), then rmdir it."""
    deadline = time.monotonic() + 10.0
    while (pids := _pids(group)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    with contextlib.suppress(FileNotFoundError):
        group.rmdir()  # EBUSY (an OSError) if something is still inside after 10 s


def remove_stale(root: Path = ROOT) -> list[str]:
    """Remove the cgroups a dead pid created (``kbench<pid>h<i>``); returns their names."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for group in sorted(root.iterdir()):
            match = _OURS.match(group.name)
            if match and group.is_dir() and not _alive(int(match[1])):
                _empty_and_remove(group)
                removed.append(group.name)
    return removed


def unavailable(root: Path = ROOT) -> str | None:
    """Why CPU-quota hosts cannot be created here, in one line; ``None`` when they can."""
    if not (root / "cpu.cfs_quota_us").is_file():
        return f"{root} is not a cgroup v1 cpu controller (no cpu.cfs_quota_us there)"
    if os.geteuid() != 0 or not os.access(root, os.W_OK):
        return f"{root} is not writable: run as root on a host with a cgroup v1 cpu controller"
    return None


class CpuHosts:
    """``count`` cgroups of ``cores`` CPUs each (see the module docstring)."""

    def __init__(self, count: int, cores: float, root: Path = ROOT) -> None:
        if not 0.01 <= cores <= (os.cpu_count() or 1):
            raise HostsUnavailable(
                f"a host's CPU quota must be 0.01-{os.cpu_count() or 1} cores, not {cores}"
            )
        self.count, self.cores, self.root = count, cores, root
        self.pid = os.getpid()
        self.groups: list[Path] = []

    def start(self) -> CpuHosts:
        reason = unavailable(self.root)
        if reason is not None:
            raise HostsUnavailable(reason)
        remove_stale(self.root)
        try:
            for i in range(self.count):
                group = self.root / f"kbench{self.pid}h{i}"
                group.mkdir()
                self.groups.append(group)
                (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (group / "cpu.cfs_quota_us").write_text(str(round(self.cores * PERIOD_US)))
        except OSError as exc:
            self.stop()
            raise HostsUnavailable(f"cannot create a cgroup under {self.root}: {exc}") from None
        return self

    def wrap(self, i: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside host ``i`` from its first instruction (same pid: the shell execs)."""
        return ["/bin/sh", "-c", _WRAPPER, str(self.groups[i] / "cgroup.procs"), *argv]

    def throttled(self, i: int) -> tuple[int, int, float]:
        """Host ``i``'s CFS periods so far, how many of them throttled, and seconds throttled."""
        stat = dict(line.split() for line in (self.groups[i] / "cpu.stat").read_text().splitlines())
        return int(stat["nr_periods"]), int(stat["nr_throttled"]), int(stat["throttled_time"]) / 1e9

    def stop(self) -> None:
        """Kill what is left inside, remove every cgroup created; never raises."""
        groups, self.groups = self.groups, []
        for group in reversed(groups):
            with contextlib.suppress(OSError):
                _empty_and_remove(group)

    def __enter__(self) -> CpuHosts:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
