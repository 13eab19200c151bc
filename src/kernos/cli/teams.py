"""``kernos teams [--json]``: every team in the store with its members and board (see
``kernos.tasks.TeamStore.overview``)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from kernos.cli._common import ConfigOption, write_stdout


def register(app: typer.Typer) -> None:
    @app.command("teams")
    def teams_command(
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """Teams of sub-agents: members with status and unread mail, and the shared board."""
        from kernos.cli.tasks import task_store
        from kernos.tasks import TeamStore

        with task_store(config) as store:
            teams = TeamStore(store.store).overview()
        if as_json:
            write_stdout(json.dumps({"teams": teams}, ensure_ascii=False, default=str))
            return
        if not teams:
            write_stdout("no teams yet; a lead forms one with task(team=..., name=...)")
            return
        lines: list[str] = []
        for team in teams:
            lines.append(
                f"team {team['team']} (lead {team['lead_session']}, unread {team['lead_unread']})"
            )
            for m in team["members"]:
                lines.append(f"  {m['name']}  {m['task_id']}  {m['status']}  unread {m['unread']}")
            for item in team["board"]:
                owner = f" by {item['owner']}" if item["owner"] else ""
                lines.append(f"  board {item['id']}. [{item['status']}{owner}] {item['title']}")
        write_stdout("\n".join(lines))
