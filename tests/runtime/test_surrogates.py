"""Text from a model is data (docs/architecture.md): a lone surrogate, wherever a model or a tool
puts one (tool-call arguments, raw or escaped in their JSON; a tool's result; the assistant's text),
is cleaned once where it enters kernos, so no request, store row or output ever fails to encode.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic_ai.messages import ToolCallPart

from kernos.boundary import ToolContext, ToolSpec, clean_text
from kernos.runtime import Config, Session, Store, resolve_model
from kernos.runtime._models._clean import clean_part
from kernos.runtime._models._lean_wire import StreamAccumulator, parse_completion
from kernos.testing import FakeOpenAIServer, text, tool_call, tool_calls
from tests.conftest import KERNOS


class _Key(BaseModel):
    key: str


def _echo_tool(tail: list[str]) -> ToolSpec[_Key]:
    """A tool whose result carries its argument and ``tail[0]`` (surrogates a tool may return)."""

    async def echo(params: _Key, ctx: ToolContext) -> str:
        return f"got {params.key} {tail[0]}"

    return ToolSpec("echo", "Echo a key.", _Key, echo)


def _surrogates(value: Any) -> list[str]:
    """Every string in a JSON value (tool-call argument text parsed too) that cannot be encoded."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
            if isinstance(item.get("arguments"), str):
                stack.append(json.loads(item["arguments"]))
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and clean_text(item) is not item:
            found.append(item)
    return found


_RUNS = itertools.count()
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")

# text with lone surrogates anywhere: at the start, the end, between characters, next to a real
# pair; a high one drawn just before a low one is split apart (together the wire would join them)
_pieces = st.one_of(
    st.text(max_size=4),
    st.characters(codec=None, min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.just("\U0001f600"),
)
_dirty = st.lists(_pieces, max_size=6).map(
    lambda pieces: _PAIR.sub(lambda m: f"{m[0][0]}-{m[0][1]}", "".join(pieces))
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(args=_dirty, result=_dirty, answer=_dirty, stream=st.booleans())
def test_lone_surrogates_anywhere_never_break_a_run(
    openai_env: FakeOpenAIServer, tmp_path: Path, args: str, result: str, answer: str, stream: bool
) -> None:
    start = len(openai_env.requests)
    tail = [result]
    store = Store(tmp_path / "kernos.db")
    tag = f"run {next(_RUNS)}"  # a failed example's leftover replies never answer the next one
    session = Session(
        resolve_model("openai-chat:test", Config()),
        f"Be brief ({tag}).",
        [_echo_tool(tail)],
        store=store,
        stream=stream,
    )
    escaped = json.dumps({"key": args})  # every lone surrogate a \\udXXX escape in the JSON text
    raw = json.dumps({"key": args}, ensure_ascii=False)  # written into the arguments text
    openai_env.script(
        tool_calls(("echo", escaped), ("echo", raw), when=tag, when_system=True),
        text(f"ok {answer}", when=tag, when_system=True),
    )
    try:
        final = asyncio.run(session.prompt(f"go {args}"))
    finally:
        store.close()
    assert final == clean_text(f"ok {answer}")
    key = clean_text(args)
    sent = openai_env.requests[start:]
    assert _surrogates(sent) == []  # nothing unencodable ever goes back to the provider
    assert len(sent) == 2
    history = sent[-1]["messages"]
    assert history[1]["content"] == clean_text(f"go {args}")
    results = [m["content"] for m in history if m["role"] == "tool"]
    assert results == [clean_text(f"got {key} {result}")] * 2
    calls = next(m["tool_calls"] for m in history if m.get("tool_calls"))
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"key": key}] * 2
    reopened = Store(tmp_path / "kernos.db")
    turns = reopened.turns(session.session_id)
    reopened.close()
    assert turns[-1]["text"] == final
    assert _surrogates(turns) == []


def test_an_escaped_lone_surrogate_in_a_path_argument_ends_the_run_cleanly(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # the reproduction: `"nothing-\udce9.txt"` escaped in the arguments JSON used to end
    # `kernos run` with UnicodeEncodeError when the history was sent back (exit 1)
    server.script(tool_call("read_file", '{"path": "nothing-\\udce9.txt"}'), text("done"))
    env = {**os.environ, **server.env(), "KERNOS_HOME": str(tmp_path / ".kernos")}
    env.pop("KERNOS_MODEL", None)
    result = subprocess.run(
        [KERNOS, "run", "read it", "-m", "openai-chat:x"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n"
    assert "UnicodeEncodeError" not in result.stderr
    sent = server.requests[-1]["messages"]
    call = next(m for m in sent if m.get("tool_calls"))["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"path": "nothing-\ufffd.txt"}
    assert "nothing-\ufffd.txt" in sent[-1]["content"]  # the tool's refusal names the cleaned path


def test_a_call_id_is_cleaned_where_the_answer_enters() -> None:
    completion = {
        "choices": [
            {
                "message": {
                    "tool_calls": [
                        {
                            "id": "c\udce9",
                            "function": {"name": "n", "arguments": '{"a": "\\udce9"}'},
                        }
                    ]
                }
            }
        ]
    }
    assert parse_completion(completion).calls == [("c\ufffd", "n", '{"a": "\\ufffd"}')]
    stream = StreamAccumulator()
    delta = {"tool_calls": [{"index": 0, "id": "c\udce9", "function": {"name": "n"}}]}
    stream.feed({"choices": [{"delta": delta}]})
    stream.feed(
        {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": '{"a": "\\ud'}}]}}]}
    )
    stream.feed({"choices": [{"delta": {"tool_calls": [{"function": {"arguments": 'ce9"}'}}]}}]})
    assert stream.finish().calls == [("c\ufffd", "n", '{"a": "\\ufffd"}')]
    part = ToolCallPart("n", '{"a": "\\udce9"}', tool_call_id="c\udce9")
    cleaned = clean_part(part)
    assert isinstance(cleaned, ToolCallPart)
    assert (cleaned.tool_call_id, cleaned.args) == ("c\ufffd", '{"a": "\\ufffd"}')
