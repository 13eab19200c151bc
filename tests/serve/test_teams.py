"""``kernos mcp`` serves the team tools to a host, which is the lead of the teams it forms: driven
by the official ``mcp`` SDK client over stdio, members on the local model server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp import Client

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests._wait import until
from tests.serve.test_stdio import connect, only_text
from tests.tasks.tasks_helpers import messages, text_of

LEAD_TOOLS = {"team_send", "team_status", "team_wait", "board_add", "board_list", "board_update"}


def member(job: str, latest: str | None = None) -> Callable[[dict[str, Any]], bool]:
    """A ``when=`` for the requests of the member whose first message carries ``job``,
    optionally whose latest message contains ``latest``."""

    def match(request: dict[str, Any]) -> bool:
        said = messages(request)
        users = [m for m in said if m.get("role") == "user"]
        if not users or job not in text_of(users[0]):
            return False
        return latest is None or latest in text_of(said[-1])

    match.__name__ = f"member({job!r}, {latest!r})"
    return match


async def call(client: Client, tool: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(tool, args)
    said = only_text(result)
    assert not result.is_error, said
    return said


async def test_the_host_leads_a_team_mail_board_and_wait_over_stdio(
    project: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        # alpha mails beta, then finishes; beta finishes, is told (or revived) by the mail and
        # reports to the host; the host's own mail revives alpha
        tool_call(
            "team_send", {"to": "beta", "message": "hello beta"}, when=member("ALPHA-JOB", "JOB")
        ),
        text("alpha done", when=member("ALPHA-JOB", "beta")),
        tool_call(
            "team_send",
            {"to": "lead", "message": "beta got alpha's mail"},
            when=member("BETA-JOB", "hello beta"),
        ),
        text("beta idle", when=member("BETA-JOB", "BETA-JOB")),
        text("beta relayed", when=member("BETA-JOB", "lead")),
        tool_call("board_list", {}, when=member("ALPHA-JOB", "take item 1")),
        text("alpha saw the board", when=member("ALPHA-JOB", "write the report")),
    )
    crew = {
        "team": "crew",
        "subagent_type": "explore",
        "run_in_background": True,
        "tasks": [{"prompt": "ALPHA-JOB", "name": "alpha"}, {"prompt": "BETA-JOB", "name": "beta"}],
    }
    async with connect(project, server) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert LEAD_TOOLS | {"task"} <= names  # the host can lead before it forms a team
        early = await client.call_tool("team_status", {})
        assert early.is_error
        assert "You lead no team yet" in only_text(early)

        await call(client, "task", crew)
        # the member's mail to the lead is the host's: team_wait for it takes it
        mail = await call(client, "team_wait", {"until": "mail", "timeout": 60})
        assert mail.startswith("Team mail from beta (team crew):\nbeta got alpha's mail"), mail
        idle = await call(client, "team_wait", {"until": "idle", "timeout": 60})
        assert idle.startswith("Every member of team crew is idle or finished:"), idle

        added = await call(client, "board_add", {"title": "write the report"})
        assert added == "Added board item 1 (open): write the report"
        sent = await call(client, "team_send", {"to": "alpha", "message": "take item 1"})
        assert sent == "Delivered to alpha; it had finished and starts a new run with it."
        await call(client, "team_wait", {"until": "idle", "timeout": 60})
        status = await call(client, "team_status", {})
        assert status.startswith("Team crew:\n- alpha t_"), status
        assert "Unread mail for you: 0." in status
        board = await call(client, "board_list", {"status": "open"})
        assert board == "1. [open] write the report"
    server.assert_all_consumed()
    results = server.tool_results()
    assert "1. [open] write the report" in results  # alpha read the host's board


async def test_mail_for_the_host_rides_along_with_its_next_call(
    project: Path, server: FakeOpenAIServer
) -> None:
    server.script(
        tool_call(
            "team_send", {"to": "lead", "message": "solo reporting"}, when=member("SOLO-JOB", "JOB")
        ),
        text("solo done", when=member("SOLO-JOB", "lead")),
    )
    crew = {"team": "one", "subagent_type": "explore", "prompt": "SOLO-JOB", "name": "solo",
            "run_in_background": True}  # fmt: skip
    async with connect(project, server) as client:
        await call(client, "task", crew)
        seen: list[str] = []

        async def mail_arrived() -> bool:
            seen.append(await call(client, "board_list", {}))
            return "Team mail from solo (team one):\nsolo reporting" in seen[-1]

        await until(mail_arrived, "the member's mail appended to a result of the host")
        assert seen[-1].startswith("The board of team one has no items.\n\n"), seen[-1]
        again = await call(client, "team_status", {})
        assert "solo reporting" not in again  # read once
        assert "Unread mail for you: 0." in again
