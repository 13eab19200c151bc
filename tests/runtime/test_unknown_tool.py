"""A call to a tool the agent does not have: one coded ``unknown_tool`` answer naming the closest
tools it has, with the call's events like any other call."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from kernos.boundary import ToolContext, ToolSpec
from kernos.runtime import Config, Session, SessionEvent, Store, resolve_model
from kernos.runtime._session._toolset import unknown_tool_result
from kernos.testing import FakeOpenAIServer, text, tool_call


class KeyParams(BaseModel):
    key: str


async def _lookup(params: KeyParams, ctx: ToolContext) -> str:
    return f"value of {params.key}"


def _spec(name: str) -> ToolSpec[Any]:
    return ToolSpec(name=name, description="Look a key up.", params=KeyParams, execute=_lookup)


TOOLS = [_spec("lookup_key"), _spec("list_keys"), _spec("read_file")]

ANSWER = (
    "There is no tool `lookup`. The closest tools you have: `lookup_key`. "
    "Call a tool by one of its exact names."
)


def _run(server: FakeOpenAIServer, tmp_path: Path) -> tuple[Any, Any, Any]:
    store = Store(tmp_path / "unknown.db")
    events: list[SessionEvent] = []
    session = Session(
        resolve_model("openai-chat:test", Config()),
        "Be brief.",
        TOOLS,
        store=store,
        on_event=events.append,
        session_id="s_unknown",
    )
    assert asyncio.run(session.prompt("find")) == "done"
    wire = [r["messages"] for r in server.requests]
    turns = [
        {k: v for k, v in t.items() if k not in ("id", "created_at")}
        for t in store.turns("s_unknown")
    ]
    shown = [
        (e.kind, e.data["name"], e.data["result"].text, e.data["result"].code)
        if e.kind == "tool_result"
        else (e.kind, json.dumps(e.data, default=str, sort_keys=True))
        for e in events
        if e.kind in ("tool_call", "tool_result")
    ]
    store.close()
    return wire, turns, shown


def test_an_unknown_tool_gets_the_coded_answer(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server, pytest.MonkeyPatch.context() as patch:
        server.script(
            tool_call("lookup", {"key": "a"}),
            tool_call("lookup_key", {"key": "a"}, when="closest tools you have"),
            text("done", when="value of a"),
        )
        for key, value in server.env().items():
            patch.setenv(key, value)
        wire, turns, shown = _run(server, tmp_path)
        server.assert_all_consumed()
    answered = wire[1][-1]
    assert answered["role"] == "tool"
    assert ANSWER in answered["content"]
    assert json.loads(shown[0][1])["name"] == "lookup"
    assert shown[1] == ("tool_result", "lookup", ANSWER, "unknown_tool")
    assert turns[2]["tool_results"][0]["details"]["code"] == "unknown_tool"


def test_the_answer_names_close_tools_else_the_ones_there_are() -> None:
    close = unknown_tool_result("serch_files", ["read_file", "search_files", "list_files"])
    assert close.code == "unknown_tool"
    assert close.details["closest"][0] == "search_files"  # the closest first
    assert "The closest tools you have: `search_files`, " in close.text
    far = unknown_tool_result("deploy", ["read_file", "list_files"])
    assert "The tools you have: `list_files`, `read_file`." in far.text
    many = unknown_tool_result("zzz", [f"tool_{i:02}" for i in range(25)])
    assert "`tool_19` (and 5 more)." in many.text
    assert "You have no tools in this session" in unknown_tool_result("x", []).text
