"""Replay cassettes and recording without secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernos.runtime import (
    CassetteError,
    Config,
    RecordingModel,
    ReplayModel,
    Session,
    resolve_model,
)
from kernos.testing import FakeOpenAIServer, text


def cassette(path: Path, turns: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps({"version": 1, "turns": turns}))
    return path


async def test_replay_serves_turns_in_order_and_by_match(tmp_path: Path) -> None:
    model = ReplayModel(
        cassette(
            tmp_path / "c.json",
            [
                {"match": "child", "text": "child answer"},
                {"text": "first"},
                {"text": "second"},
            ],
        )
    )
    parent = Session(model, "p")
    child = Session(model, "c")
    assert await parent.prompt("hello") == "first"
    assert await child.prompt("you are a child") == "child answer"
    assert await parent.prompt("again") == "second"
    assert model.remaining == 0


async def test_repeating_turns_are_never_used_up(tmp_path: Path) -> None:
    model = ReplayModel(
        cassette(tmp_path / "c.json", [{"match": "notice", "text": "noted", "repeat": True}])
    )
    session = Session(model, "")
    assert [await session.prompt(f"notice {n}") for n in range(3)] == ["noted"] * 3


async def test_a_request_the_cassette_cannot_answer_fails_loudly(tmp_path: Path) -> None:
    model = ReplayModel(cassette(tmp_path / "c.json", [{"match": "only this", "text": "x"}]))
    with pytest.raises(
        CassetteError, match=r"no turn left for this request \(latest message: 'hi there'\)"
    ):
        await Session(model, "").prompt("hi there")


def test_malformed_cassettes_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(CassetteError, match="not valid JSON"):
        ReplayModel(bad)
    bad.write_text('{"turns": 3}')
    with pytest.raises(CassetteError, match="list of turn objects"):
        ReplayModel(bad)


async def test_recording_writes_turns_without_keys_and_replays_them(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = "sk-live-0123456789abcdef"
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    server.script(text("recorded answer"))
    path = tmp_path / "rec.json"
    model = RecordingModel(resolve_model("openai-chat:test", Config()), path)
    assert await Session(model, "sys").prompt("question") == "recorded answer"
    assert server.auth_headers == [f"Bearer {secret}"]
    written = path.read_text()
    assert secret not in written and "Authorization" not in written
    assert json.loads(written)["turns"] == [{"match": "question", "text": "recorded answer"}]
    assert await Session(ReplayModel(path), "sys").prompt("question") == "recorded answer"
