"""Sessions over real HTTP to the local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai.exceptions import UnexpectedModelBehavior

from kernos.boundary import ToolContext, ToolError, ToolSpec, identifier
from kernos.runtime import Config, Runtime, Session, SessionEvent, Store, resolve_model
from kernos.testing import FakeOpenAIServer, text, tool_call


class LookupParams(BaseModel):
    key: str
    hint: str | None = None


seen: list[LookupParams] = []


def prepare_lookup(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    out = {k: v for k in ("key", "hint") if (v := identifier(raw.get(k))) is not None}
    if "key" in raw and "key" not in out:
        out["key"] = raw["key"]
    return out


def validate_lookup(params: LookupParams) -> ToolError | None:
    if params.key == "forbidden":
        return ToolError("forbidden_key", "That key is off limits; pick another.")
    return None


async def execute_lookup(params: LookupParams, ctx: ToolContext) -> str:
    seen.append(params)
    return f"value of {params.key}"


LOOKUP = ToolSpec(
    name="lookup",
    description="Look a key up.",
    params=LookupParams,
    execute=execute_lookup,
    prepare=prepare_lookup,
    validate=validate_lookup,
    max_retries=1,
)


@pytest.fixture(autouse=True)
def _reset() -> None:
    seen.clear()


def make_session(store: Store | None = None, **kw: Any) -> Session:
    return Session(
        resolve_model("openai-chat:test", Config()), "Be brief.", [LOOKUP], store=store, **kw
    )


def messages_of(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in request["messages"]]


async def test_padded_call_reaches_prepare_before_the_schema(openai_env: FakeOpenAIServer) -> None:
    openai_env.script(
        tool_call("lookup", {"key": " alpha ", "hint": "null"}),
        text("done", when="value of alpha"),
    )
    assert await make_session().prompt("find alpha") == "done"
    assert seen == [LookupParams(key="alpha")]
    assert openai_env.tool_results() == ["value of alpha"]


async def test_history_continues_across_prompts(openai_env: FakeOpenAIServer) -> None:
    openai_env.script(text("first answer"), text("second answer"))
    session = make_session()
    await session.prompt("one")
    assert await session.prompt("two") == "second answer"
    assert messages_of(openai_env.requests[-1])[-3:] == ["one", "first answer", "two"]


async def test_malformed_json_is_answered_to_the_model(openai_env: FakeOpenAIServer) -> None:
    openai_env.script(tool_call("lookup", '{"key": '), text("recovered"))
    assert await make_session().prompt("go") == "recovered"
    assert seen == []
    # the boundary's coded invalid_json text, not pydantic-ai's own parser error
    answered = openai_env.tool_results()[0]
    assert "The arguments for tool `lookup` are not valid JSON (Expecting value" in answered
    assert "Invalid JSON" not in answered


async def test_schema_error_is_a_retry_prompt_and_the_budget_is_per_tool(
    openai_env: FakeOpenAIServer,
) -> None:
    openai_env.script(tool_call("lookup", {"key": 5}), text("fixed"))
    assert await make_session().prompt("go") == "fixed"
    assert "- `key`: Input should be a valid string (got 5)." in openai_env.tool_results()[0]
    # max_retries=1: a second consecutive schema failure spends the budget and the run fails
    openai_env.script(tool_call("lookup", {"key": 5}), tool_call("lookup", {}))
    with pytest.raises(UnexpectedModelBehavior, match="lookup"):
        await make_session().prompt("go")


async def test_semantic_error_is_the_tool_text_and_the_store_keeps_the_code(
    openai_env: FakeOpenAIServer, tmp_path: Path
) -> None:
    store = Store(tmp_path / "kernos.db")
    openai_env.script(tool_call("lookup", {"key": "forbidden"}), text("ok"))
    session = make_session(store)
    await session.prompt("go")
    assert openai_env.tool_results() == ["That key is off limits; pick another."]
    turns = store.turns(session.session_id)
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant"]
    assert turns[2]["tool_results"][0]["details"]["code"] == "forbidden_key"
    assert turns[1]["tool_calls"][0]["name"] == "lookup"
    store.close()


async def test_messages_queued_during_a_run_are_one_batched_next_turn(
    openai_env: FakeOpenAIServer,
) -> None:
    session = make_session()

    async def execute_slow(params: LookupParams, ctx: ToolContext) -> str:
        session.inject("notice one")
        session.inject("notice two")
        return "slow done"

    session.add_tools(
        [ToolSpec(name="slow", description="x", params=LookupParams, execute=execute_slow)]
    )
    openai_env.script(
        tool_call("slow", {"key": "k"}),
        text("after tool", when="slow done"),
        text("saw notices", when="notice one"),
    )
    assert await session.prompt("start") == "saw notices"
    assert messages_of(openai_env.requests[-1])[-1] == "notice one\n\nnotice two"
    assert session.pending_messages == 0


async def test_wait_for_messages_wakes_an_idle_session(openai_env: FakeOpenAIServer) -> None:
    session = make_session()
    waiter = asyncio.create_task(session.wait_for_messages())
    await asyncio.sleep(0)  # one turn of the loop: the waiter waits
    assert not waiter.done()
    session.inject("wake up")
    await asyncio.wait_for(waiter, 2)
    assert session.take_queued() == "wake up"


async def test_events_report_tool_activity(openai_env: FakeOpenAIServer) -> None:
    events: list[SessionEvent] = []
    openai_env.script(tool_call("lookup", {"key": "a"}), text("fin"))
    await make_session(on_event=events.append).prompt("go")
    kinds = [e.kind for e in events]
    assert kinds == [
        "prompt", "request", "tool_call", "tool_result", "request", "usage", "text", "idle"
    ]  # fmt: skip
    assert events[1].data["model"] == events[4].data["model"] == "test"
    assert len(events[5].data["responses"]) == 2  # the turn's two model responses, for usage
    assert events[3].data["result"].text == "value of a"


async def test_runtime_builds_sessions_for_configured_agents(
    openai_env: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[agents.main]\ninstructions = "You are the main agent."\nmodel = "openai-chat:m1"\n'
    )
    runtime = Runtime.open(cwd=tmp_path)
    openai_env.script(text("hi"))
    session = runtime.session("main")
    assert await session.prompt("hello") == "hi"
    request = openai_env.requests[0]
    assert request["model"] == "m1"
    assert request["messages"][0] == {"role": "system", "content": "You are the main agent."}
    assert runtime.store.turns(session.session_id)[0]["text"] == "hello"
    runtime.close()


async def test_serve_delivers_late_messages_until_watchers_are_done(
    openai_env: FakeOpenAIServer,
) -> None:
    session = make_session()

    class Child:
        """Finishes after the first prompt, sending one completion notice."""

        def __init__(self) -> None:
            self.done = asyncio.Event()
            self.waited = asyncio.Event()  # serve waits for it: the first prompt is over

        def outstanding(self) -> bool:
            return not self.done.is_set()

        async def wait_change(self) -> None:
            self.waited.set()
            await self.done.wait()

    child = Child()

    async def finish_later() -> None:
        await child.waited.wait()
        session.inject("child finished")
        child.done.set()

    openai_env.script(text("waiting for the child"), text("all done", when="child finished"))
    finisher = asyncio.create_task(finish_later())
    assert await session.serve("start", [child]) == "all done"
    await finisher
    openai_env.assert_all_consumed()
