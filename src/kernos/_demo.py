"""``kernos demo``: offline, replayed from bundled cassettes."""

from __future__ import annotations


def run_demo() -> int:
    """Run the demo; returns the exit code."""
    raise NotImplementedError("the demo is assembled once the subsystems land")
