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


def test_a_request_counted_under_its_key_is_not_counted_again(store_target: str) -> None:
    """A durable run replayed after a crash asks again for the requests it made: each key is
    counted once; a request refused at the limit is refused again, and counts nothing."""
    store = TeamStore(Store(store_target))
    try:
        assert store.count_request("s_lead", "crew", 3, "t_a:1:1") == 1
        assert store.count_request("s_lead", "crew", 3, "t_a:1:2") == 2
        assert store.count_request("s_lead", "crew", 3, "t_a:1:1") == 2  # the replay: no more
        assert store.count_request("s_lead", "crew", 3, "t_a:1:2") == 2
        assert store.count_request("s_lead", "crew", 3) == 3  # no key: each counted
        assert store.count_request("s_lead", "crew", 3, "t_b:1:1") is None  # at the limit
        assert store.count_request("s_lead", "crew", 3, "t_b:1:1") is None  # and again
        assert store.count_request("s_lead", "crew", 3, "t_a:1:1") == 3  # counted before
        assert store.requests("s_lead", "crew") == 3
        assert store.count_request("s_lead", "other", 3, "t_a:1:1") == 1  # a key is per team
    finally:
        store.store.close()
