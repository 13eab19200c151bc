"""The team tables on SQLite and PostgreSQL: a board item is claimed by exactly one of several
processes racing for it, a message sent twice under one key is stored once, and a take replayed
under its key reads the same mail again while a new take reads nothing twice."""

from __future__ import annotations

from test_store_claims import race

from kernos.runtime import Store
from kernos.tasks._team_store import TeamStore

ITEMS = 20
RACERS = 4


def test_each_board_item_is_claimed_by_exactly_one_racer(store_target: str) -> None:
    setup = TeamStore(Store(store_target))
    ids = [setup.board_add("s_lead", "crew", f"item {n}", None, "lead") for n in range(ITEMS)]
    stores = [TeamStore(Store(store_target)) for _ in range(RACERS)]

    def claim(n: int, store: TeamStore) -> set[int]:
        won = set()
        for item in ids:
            fields = {"status": "claimed", "owner": f"m{n}"}
            if store.board_set("s_lead", "crew", item, fields, only_from=("open",)) is not None:
                won.add(item)
        return won

    results = race(stores, claim)
    for racer in stores:
        racer.store.close()
    assert sum(len(won) for won in results) == ITEMS  # every item once, none twice
    assert set().union(*results) == set(ids)
    board = setup.board("s_lead", "crew")
    for n, won in enumerate(results):
        assert {item["id"] for item in board if item["owner"] == f"m{n}"} == won
    setup.store.close()


def test_mail_is_stored_once_per_key_and_read_once(store_target: str) -> None:
    store = TeamStore(Store(store_target))
    assert store.post("s_lead", "crew", "alpha", "beta", "one", key="wf:1") == 1
    assert store.post("s_lead", "crew", "alpha", "beta", "one", key="wf:1") == 1  # a replay
    assert store.post("s_lead", "crew", "alpha", "beta", "two") == 2
    assert store.unread("s_lead", "crew") == {"beta": 2}
    first = store.take("s_lead", "crew", "beta", "1:t1")
    assert first == [("alpha", "one"), ("alpha", "two")]
    assert store.take("s_lead", "crew", "beta", "1:t1") == first  # the same take, replayed
    assert store.take("s_lead", "crew", "beta", "1:t2") == []  # nothing is read twice
    assert store.post("s_lead", "crew", "alpha", "beta", "one", key="wf:1") == 1  # read already
    assert len(store.mail("s_lead", "crew")) == 2
    store.store.close()
