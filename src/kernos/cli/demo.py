"""``kernos demo``: the whole kernel, offline, driven by a bundled cassette."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo_command() -> None:
        """Run a replayed session offline: padded task calls, a batch send, a compression."""
        from kernos._demo import run_demo

        raise typer.Exit(run_demo())
