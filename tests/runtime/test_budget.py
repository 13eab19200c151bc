"""Budget rules without I/O: durations, the choice of limits, the meter before each request."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernos.runtime import (
    Budget,
    BudgetExceeded,
    ConfigError,
    KernosError,
    format_duration,
    load_config,
    parse_agent_file,
    parse_duration,
)
from kernos.runtime._rules._budget import MAIN_DEFAULTS, BudgetMeter, parse_count, pick_budget


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("30s", 30.0),
        ("10m", 600.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        (" 2m 5s ", 125.0),
        ("45", 45.0),
        (90, 90.0),
        (2.5, 2.5),
        ("0", 0.0),
        ("0s", 0.0),
        ("10M", 600.0),
    ],
)
def test_durations(given: object, seconds: float) -> None:
    assert parse_duration(given) == seconds


@pytest.mark.parametrize(
    "given", ["soon", "", "   ", "-5m", -5, "10 minutes", "m", "5m1h", True, None, [], "inf", 1e400]
)
def test_not_durations(given: object) -> None:
    with pytest.raises(ValueError, match=r"not a duration|negative"):
        parse_duration(given)


@pytest.mark.parametrize(
    ("seconds", "shown"), [(30, "30s"), (600, "10m"), (5400, "1h30m"), (3600, "1h"), (2.5, "2.5s")]
)
def test_format_duration(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown


@pytest.mark.parametrize("given", [-1, 1.5, "3", True, None])
def test_counts_are_whole_numbers(given: object) -> None:
    with pytest.raises(ValueError):
        parse_count(given)


def test_target_keys_win_over_defaults_and_zero_lifts_them() -> None:
    defaults = Budget(timeout=600, max_turns=10, max_tokens=5000)
    agent = Budget(max_turns=3, max_tokens=0)
    assert pick_budget(defaults, agent) == Budget(timeout=600, max_turns=3, max_tokens=None)
    assert pick_budget(defaults, None) == defaults
    assert pick_budget(None, None) == Budget()
    assert not Budget() and Budget(max_turns=1)


def test_meter_refuses_the_request_after_max_turns() -> None:
    meter = BudgetMeter(Budget(max_turns=2))
    meter.before_request()
    meter.before_request()
    with pytest.raises(BudgetExceeded) as raised:
        meter.before_request()
    exc = raised.value
    assert (exc.code, exc.limit, exc.value, exc.used) == (
        "budget_exceeded",
        "max_turns",
        "2",
        "2 model requests made",
    )
    assert isinstance(exc, KernosError)


def test_meter_refuses_once_max_tokens_are_used() -> None:
    meter = BudgetMeter(Budget(max_tokens=100))
    meter.before_request()
    meter.add_tokens(99)
    meter.before_request()
    meter.add_tokens(1)
    with pytest.raises(BudgetExceeded, match="max_tokens = 100 reached"):
        meter.before_request()


def test_no_limits_never_refuse() -> None:
    meter = BudgetMeter(Budget())
    for _ in range(1000):
        meter.before_request()
    assert meter.requests == 1000


def test_timeout_error_code() -> None:
    assert BudgetExceeded("timeout", "10m", "ran 600.0s").code == "timeout"


def test_config_keys_everywhere(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[tasks]\ntimeout = "10m"\nmax_turns = 20\n'
        "[agents.explore]\nmax_tokens = 5000\n"
        '[categories.quick]\ntimeout = "30s"\nmax_turns = 0\n'
    )
    agents = tmp_path / ".kernos" / "agents"
    agents.mkdir(parents=True)
    (agents / "review.md").write_text("---\ntimeout: 1h\nmax_turns: 4\n---\nReview.\n")
    config = load_config(cwd=tmp_path)
    assert config.task_budget(agent="explore") == Budget(600, 20, 5000, 32)
    assert config.task_budget(category="quick") == Budget(30, None, None, 32)
    assert config.task_budget(agent="review") == Budget(3600, 4, None, 32)
    assert config.task_budget(agent="ghost") == Budget(600, 20, None, 32)
    assert config.agent_budget("explore") == Budget(None, 50, 5000, 32)
    assert parse_agent_file(agents / "review.md").timeout == 3600


def test_bounds_hold_by_default_and_zero_lifts_each(tmp_path: Path) -> None:
    config = load_config(cwd=tmp_path)  # no kernos.toml at all
    # a child: 30 minutes, 50 model requests, 32 tool calls per answer; a main agent: no clock
    assert config.task_budget(agent="explore") == Budget(1800, 50, None, 32)
    assert config.task_budget(category="quick") == Budget(1800, 50, None, 32)
    assert config.agent_budget("main") == Budget(None, 50, None, 32)
    (tmp_path / "kernos.toml").write_text(
        "[tasks]\ntimeout = 0\nmax_turns = 0\nmax_tool_calls_per_turn = 0\n"
        "[agents.main]\nmax_turns = 0\nmax_tool_calls_per_turn = 5\n"
    )
    config = load_config(cwd=tmp_path)
    assert config.task_budget(agent="explore") == Budget()
    assert config.agent_budget("main") == Budget(None, None, None, 5)
    assert pick_budget(None, None, fallback=MAIN_DEFAULTS) == MAIN_DEFAULTS


def test_bad_value_in_an_agent_file_names_the_file(tmp_path: Path) -> None:
    agents = tmp_path / ".kernos" / "agents"
    agents.mkdir(parents=True)
    (agents / "review.md").write_text("---\ntimeout: soon\n---\nReview.\n")
    with pytest.raises(ConfigError) as raised:
        load_config(cwd=tmp_path)
    assert str(raised.value).startswith(f"{agents / 'review.md'}: timeout: 'soon' is not a ")
    assert raised.value.fix.startswith('write a duration such as "30s"')
