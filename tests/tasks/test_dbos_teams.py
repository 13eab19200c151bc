"""Teams on the DBOS engine (SQLite, children executed by the run's own process): the same
scenarios as tests/tasks/test_teams.py, with each member's team tools as DBOS steps and its mail
taken under its run's keys."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from test_dbos import use_dbos
from test_teams import (
    test_a_claim_race_has_one_winner_and_the_loser_is_told_who as claim_race,
)
from test_teams import (
    test_a_team_of_three_mails_broadcasts_revives_and_the_lead_waits as team_of_three,
)
from test_teams import (
    test_team_max_turns_stops_two_members_mailing_each_other_forever as ping_pong,
)

from kernos.runtime import Runtime, load_config
from kernos.testing import FakeOpenAIServer

Scenario = Callable[[Runtime, FakeOpenAIServer], Awaitable[None]]


@pytest.mark.parametrize("scenario", [team_of_three, claim_race], ids=["team_of_three", "race"])
async def test_a_team_on_the_dbos_engine(
    project: Path, server: FakeOpenAIServer, scenario: Scenario
) -> None:
    use_dbos(project)
    runtime = Runtime(load_config(cwd=project))
    try:
        assert runtime.config.tasks.engine == "dbos"
        await scenario(runtime, server)
    finally:
        runtime.close()


async def test_team_max_turns_on_the_dbos_engine_is_counted_in_the_store(
    project: Path, server: FakeOpenAIServer
) -> None:
    use_dbos(project)
    await ping_pong(project, server)
    from kernos.runtime import Store
    from kernos.tasks import TeamStore

    store = Store.open(project / ".kernos")
    try:
        teams = TeamStore(store)
        ((lead, team),) = teams.teams()
        assert teams.requests(lead, team) == 6
    finally:
        store.close()
