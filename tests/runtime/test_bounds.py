"""Bounds by default (README, "Bounds"): one model answer runs at most ``max_tool_calls_per_turn``
tool calls (default 32) and each call past them is answered ``too_many_tool_calls`` without
running; a main agent stops after 50 model requests when nothing is
configured (``0`` lifts it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from kernos.boundary import ToolContext, ToolSpec
from kernos.runtime import Budget, Config, Session, resolve_model
from kernos.testing import FakeOpenAIServer, text, tool_call, tool_calls

KERNOS = str(Path(sys.executable).with_name("kernos"))


class KeyParams(BaseModel):
    key: str


def _counting_tool(ran: list[str]) -> ToolSpec[KeyParams]:
    async def lookup(params: KeyParams, ctx: ToolContext) -> str:
        ran.append(params.key)
        return f"value of {params.key}"

    return ToolSpec(name="lookup", description="Look a key up.", params=KeyParams, execute=lookup)


def _tool_messages(request: dict[str, object]) -> list[str]:
    messages = request["messages"]
    assert isinstance(messages, list)
    return [str(m["content"]) for m in messages if m.get("role") == "tool"]


async def test_an_answer_with_40_tool_calls_runs_32(openai_env: FakeOpenAIServer) -> None:
    ran: list[str] = []
    openai_env.script(tool_calls(*[("lookup", {"key": f"k{n}"}) for n in range(40)]), text("done"))
    session = Session(resolve_model("openai-chat:test", Config()), "", [_counting_tool(ran)])
    assert await session.prompt("look up everything") == "done"
    assert sorted(ran, key=lambda k: int(k[1:])) == [f"k{n}" for n in range(32)]
    answers = _tool_messages(openai_env.requests[-1])
    assert len(answers) == 40
    assert answers[:32] == [f"value of k{n}" for n in range(32)]
    assert set(answers[32:]) == {
        "Not run: one answer runs at most 32 tool calls and this call came after them. Make at "
        "most 32 tool calls per turn; send this call again next turn if you still need it."
    }


async def test_the_cap_is_configurable_and_a_budget_without_it_has_none(
    openai_env: FakeOpenAIServer,
) -> None:
    ran: list[str] = []
    openai_env.script(tool_calls(*[("lookup", {"key": f"k{n}"}) for n in range(5)]), text("one"))
    session = Session(resolve_model("openai-chat:test", Config()), "", [_counting_tool(ran)])
    session.set_budget(Budget(max_tool_calls_per_turn=2))
    assert await session.prompt("first") == "one"
    assert ran == ["k0", "k1"]
    refused = [a for a in _tool_messages(openai_env.requests[-1]) if a.startswith("Not run")]
    assert len(refused) == 3 and "at most 2 tool calls" in refused[0]
    ran.clear()
    session.set_budget(Budget(max_turns=10))  # configured 0 (or not at all, with other limits)
    openai_env.script(tool_calls(*[("lookup", {"key": f"z{n}"}) for n in range(40)]), text("two"))
    assert await session.prompt("second") == "two"
    assert len(ran) == 40


def test_a_main_agent_that_never_stops_calling_tools_stops_at_50_by_default(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    (tmp_path / "kernos.toml").write_text('default_model = "openai-chat:test"\n')
    server.script(tool_call("list_files", {}, repeat=True))
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(tmp_path / ".kernos")}
    done = subprocess.run(
        [KERNOS, "run", "look forever"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "budget_exceeded: max_turns = 50 reached (50 model requests made)" in done.stderr
    assert len(server.requests) == 50
