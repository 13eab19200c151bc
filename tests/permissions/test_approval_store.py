"""Approval requests in a real store: one request per asked call (a replay finds its own), only an
open request moves, and of two answerers exactly one wins while the other reads who did."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernos.runtime import ApprovalRequest, ApprovalState, ApprovalStore, Store, already_answered
from kernos.runtime._rules._approval_state import can_move


def _ask(approvals: ApprovalStore, key: str = "t_1:1:call_a") -> str:
    call = ApprovalRequest(
        "write_file", {"path": "a.txt", "content": "x"}, agent="explore", session_id="s_1",
        why="the tool's own default", preview="+x",
    )  # fmt: skip
    return approvals.ask(key, call, task_id="t_1").id


def test_only_an_open_request_moves() -> None:
    for state in ApprovalState:
        assert can_move(ApprovalState.OPEN, state) == (state != ApprovalState.OPEN)
        for target in ApprovalState:
            if state != ApprovalState.OPEN:
                assert not can_move(state, target)


def test_a_replayed_call_finds_its_own_request(tmp_path: Path) -> None:
    approvals = ApprovalStore(Store(tmp_path / "kernos.db"))
    first = _ask(approvals)
    assert _ask(approvals) == first
    assert _ask(approvals, "t_1:1:call_b") != first
    assert first.startswith("a_") and len(first) == 10
    assert [r.id for r in approvals.open_requests()] == [first, _ask(approvals, "t_1:1:call_b")]


def test_the_first_answer_wins_and_the_second_is_told_who(tmp_path: Path) -> None:
    approvals = ApprovalStore(Store(tmp_path / "kernos.db"))
    other = ApprovalStore(Store(tmp_path / "kernos.db"))  # a second process's connection
    request_id = _ask(approvals)
    won, row = approvals.answer(request_id, True, by="alice", how="kernos approve")
    assert won and row is not None and row.state == ApprovalState.APPROVED
    lost, seen = other.answer(request_id, False, by="bob", how="kernos deny", reason="no")
    assert not lost and seen is not None
    assert seen.state == ApprovalState.APPROVED and seen.answered_by == "alice"
    assert already_answered(seen) == (
        f"request {request_id} was already approved by alice with kernos approve"
    )
    assert approvals.answer("a_nothere", True, by="x", how="y") == (False, None)
    with pytest.raises(ValueError, match="cannot become open"):
        approvals.settle(request_id, ApprovalState.OPEN)


def test_an_ended_task_expires_its_open_requests(tmp_path: Path) -> None:
    approvals = ApprovalStore(Store(tmp_path / "kernos.db"))
    open_id = _ask(approvals)
    answered = _ask(approvals, "t_1:1:call_b")
    approvals.answer(answered, False, by="alice", how="kernos deny")
    assert approvals.expire_task("t_1", "the task ended cancelled") == [open_id]
    row = approvals.get(open_id)
    assert row is not None and row.state == ApprovalState.EXPIRED
    assert "its task ended before it was answered" in already_answered(row)
    assert approvals.open_requests() == []


def test_tasks_watch_a_and_d_answer_the_selected_tasks_request(tmp_path: Path) -> None:
    from kernos.cli._watch import REASON_PROMPT, Source, _Screen
    from kernos.tasks import TaskStore

    store = Store(tmp_path / "kernos.db")
    approvals = ApprovalStore(store)
    screen = _Screen(Source(TaskStore(store), 10))
    screen.selected = "t_1"
    request_id = _ask(approvals)
    assert screen.key("a")
    assert screen.message == f"{request_id} approved: write_file of task t_1"
    row = approvals.get(request_id)
    assert row is not None and row.answered_how == "kernos tasks watch"
    assert screen.key("d") and screen.key("\r")
    assert screen.message == "t_1 has no open approval request"
    other = _ask(approvals, "t_1:1:call_b")
    assert screen.key("D")  # a reason first (one line, optional)
    assert screen.message == REASON_PROMPT
    for key in "not jk\x7fow":  # j and k are typed, not moves; backspace takes one back
        assert screen.key(key)
    assert screen.message == REASON_PROMPT + "not jow"
    assert screen.key("\r")
    assert screen.message == f"{other} denied: write_file of task t_1"
    row = approvals.get(other)
    assert row is not None and row.reason == "not jow" and row.answered_how == "kernos tasks watch"
    third = _ask(approvals, "t_1:1:call_c")
    assert screen.key("d") and screen.key("x") and screen.key("escape")
    assert screen.message == "not denied"
    assert [r.id for r in approvals.open_requests()] == [third]
    assert screen.key("d") and screen.key("\r")  # enter at once: denied without a reason
    row = approvals.get(third)
    assert row is not None and row.state == ApprovalState.DENIED and row.reason is None
