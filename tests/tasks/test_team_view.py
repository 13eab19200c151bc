"""The watch view's team grouping rule (kernos.tasks._team_rules.group_members), without I/O."""

from __future__ import annotations

from kernos.tasks import group_members


def test_members_come_together_at_the_place_of_their_teams_first_member() -> None:
    children = ["t_1", "t_2", "t_3", "t_4", "t_5"]
    teams = {"t_2": "red", "t_3": "blue", "t_4": "red", "t_5": "blue"}
    assert group_members(children, teams) == [
        (None, ["t_1"]),
        ("red", ["t_2", "t_4"]),
        ("blue", ["t_3", "t_5"]),
    ]


def test_without_teams_every_child_stands_alone_in_order() -> None:
    assert group_members(["t_b", "t_a"], {}) == [(None, ["t_b"]), (None, ["t_a"])]
    assert group_members([], {"t_x": "red"}) == []
