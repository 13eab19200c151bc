"""The toolset protocol and the wrappers every tool gets: the semantic stage sees a typed context
and runs before execute; config ``retries`` reaches every tool; a crashing tool's traceback is
logged (docs/architecture.md, "The tool-call pipeline")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kernos.boundary import ToolContext, ToolError, ToolSpec, call_tool
from kernos.runtime import BaseToolset, Runtime, StaticToolset, Toolset, load_config
from kernos.runtime._session._toolset import KernosToolset
from kernos.testing import FakeOpenAIServer, text, tool_call
from tests._wait import until
from tests.cli.test_run import kernos


class Args(BaseModel):
    value: str


def spec_with(validate: Any, executed: list[str]) -> ToolSpec[Args]:
    async def execute(params: Args, ctx: ToolContext) -> str:
        executed.append(params.value)
        return "ran"

    return ToolSpec("probe", "a probe", Args, execute, validate=validate)


async def test_a_tool_whose_validate_rejects_is_never_executed() -> None:
    executed: list[str] = []
    seen: list[ToolContext] = []

    def validate(params: Args, ctx: ToolContext) -> ToolError | None:
        seen.append(ctx)
        return ToolError("not_here", f"{params.value} is refused") if ctx.agent == "x" else None

    spec = spec_with(validate, executed)
    marker = object()
    refused = await call_tool(spec, {"value": "a"}, ToolContext(agent="x", session=marker))
    assert (refused.stage, refused.code, executed) == ("semantic", "not_here", [])
    assert seen[0].session is marker
    assert (await call_tool(spec, {"value": "b"}, ToolContext(agent="y"))).text == "ran"
    assert executed == ["b"]


async def test_old_one_argument_validators_and_async_ones_still_work() -> None:
    executed: list[str] = []

    def old(params: Args) -> ToolError | None:
        return ToolError("old", "old rule") if params.value == "no" else None

    async def new(params: Args, ctx: ToolContext) -> ToolError | None:
        return ToolError("async", "async rule") if params.value == "no" else None

    for validate, code in ((old, "old"), (new, "async")):
        result = await call_tool(spec_with(validate, executed), {"value": "no"})
        assert (result.stage, result.code) == ("semantic", code)
    assert executed == []


async def test_static_and_base_toolsets_follow_the_protocol() -> None:
    executed: list[str] = []
    static = StaticToolset([spec_with(lambda p: None, executed)], name="mine")
    assert isinstance(static, Toolset) and isinstance(BaseToolset(), Toolset)
    async with static as opened:
        assert [t.name for t in await opened.tools(None)] == ["probe"]
        assert not opened.outstanding()


async def test_config_retries_reach_function_and_builtin_tools(
    openai_env: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "helpers_retry.py").write_text("def shout(word: str) -> str:\n    return word\n")
    (tmp_path / "kernos.toml").write_text(
        'retries = 1\n[tools.shout]\nfunction = "helpers_retry:shout"\n'
        '[agents.main]\ntools = ["shout", "read_file"]\n'
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        runtime = Runtime(load_config(cwd=tmp_path), model="openai-chat:x")
        from kernos._app import agent_session

        async with agent_session(runtime, "main") as (session, _):
            tools = await KernosToolset(session, lambda *_: None).get_tools(None)  # type: ignore[arg-type]
            assert {"shout", "read_file"} <= tools.keys()
            assert {tools[n].max_retries for n in ("shout", "read_file")} == {1}
        runtime.close()
    finally:
        sys.path.remove(str(tmp_path))


def test_a_crashing_tool_traceback_is_in_kernos_log(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "helpers_boom.py").write_text(
        "def boom(word: str) -> str:\n    raise RuntimeError('kaboom ' + word)\n"
    )
    (tmp_path / "kernos.toml").write_text(
        '[tools.boom]\nfunction = "helpers_boom:boom"\n[agents.main]\ntools = ["boom"]\n'
    )
    server.script(tool_call("boom", {"word": "now"}), text("handled", when="kaboom"))
    result = kernos("run", "go", "-m", "openai-chat:x", cwd=tmp_path, env=server.env())
    assert (result.returncode, result.stdout) == (0, "handled\n"), result.stderr
    log = (tmp_path / ".kernos" / "kernos.log").read_text(encoding="utf-8")
    assert "tool boom failed" in log
    assert "Traceback (most recent call last)" in log and "RuntimeError: kaboom now" in log


class Recording(BaseToolset):
    """A toolset that records its lifecycle."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    async def cancel(self, reason: str) -> None:
        self.log.append(f"cancel {self.name}: {reason}")

    async def aclose(self) -> None:
        self.log.append(f"close {self.name}")


async def test_agent_session_closes_every_toolset_on_error_and_cancels_on_cancellation(
    openai_env: FakeOpenAIServer, tmp_path: Path
) -> None:
    import asyncio

    import pytest

    from kernos._app import agent_session

    runtime = Runtime(load_config(cwd=tmp_path), model="openai-chat:x")
    log: list[str] = []
    factories = [lambda rt, wait, n=n: Recording(log, n) for n in ("a", "b")]
    with pytest.raises(RuntimeError):
        async with agent_session(runtime, toolsets=factories) as (_, opened):
            assert [t.name for t in opened] == ["a", "b"]
            raise RuntimeError("body failed")
    assert log == ["close b", "close a"]
    log.clear()

    entered = asyncio.Event()

    async def body() -> None:
        async with agent_session(runtime, toolsets=factories):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(body())
    await until(entered.is_set, "the body inside its session")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == [
        "cancel a: the run was interrupted",
        "cancel b: the run was interrupted",
        "close b",
        "close a",
    ]
    runtime.close()
