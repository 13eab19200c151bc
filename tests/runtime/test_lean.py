"""The session loop on the Chat Completions wire — one loop for every model, streaming,
retries, malformed streams and cassettes recorded through any model."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from kernos.runtime import (
    Config,
    RecordingModel,
    ReplayModel,
    Runtime,
    Session,
    SessionEvent,
    resolve_model,
)
from kernos.runtime._models._lean_wire import (
    ModelResponseError,
    Reply,
    StreamAccumulator,
    retry_wait,
)
from kernos.runtime._session._lean import reply_usage, usage_responses
from kernos.runtime._session._usage import response_usage
from kernos.testing import FakeOpenAIServer, error, text, tool_call
from tests.runtime._lookup import LOOKUP


def session(**kw: Any) -> Session:
    return Session(resolve_model("openai-chat:test", Config()), "Be brief.", [LOOKUP], **kw)


# -- one loop ------------------------------------------------------------------------------------


def test_every_model_runs_on_the_one_loop_and_an_engine_key_is_ignored(
    openai_env: FakeOpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("KERNOS_ENGINE", "pydantic-ai")  # no longer read
    assert session().engine == "lean"
    assert session(engine="pydantic-ai").engine == "lean"  # accepted, chooses nothing
    (tmp_path / "kernos.toml").write_text(
        f'[models.pinned]\nmodel = "openai-chat:m"\nbase_url = "{openai_env.base_url}"\n'
        'engine = "pydantic-ai"\n'
    )
    runtime = Runtime.open(cwd=tmp_path)
    with caplog.at_level("WARNING", logger="kernos.models"):
        assert Session(runtime.model("pinned")).engine == "lean"
        runtime.model("pinned")
    told = [r.getMessage() for r in caplog.records if r.name == "kernos.models"]
    assert told == [
        "[models.pinned] engine = 'pydantic-ai' is ignored: every model runs on kernos's own "
        "loop; remove the key"
    ]  # once
    runtime.close()


async def test_history_is_pydantic_ai_messages_and_a_restored_one_continues(
    openai_env: FakeOpenAIServer,
) -> None:
    openai_env.script(tool_call("lookup", {"key": "a"}), text("first"), text("second"))
    first = session()
    assert await first.prompt("one") == "first"
    lean = session()
    lean.history = first.history
    assert await lean.prompt("two") == "second"
    sent = openai_env.requests[-1]["messages"]
    assert [m["role"] for m in sent] == [
        "system", "user", "assistant", "tool", "assistant", "user"
    ]  # fmt: skip
    assert sent[3]["content"] == "value of a"
    back = session()
    back.history = lean.history  # and the lean history reads as pydantic-ai messages
    assert [type(m).__name__ for m in back.history] == [
        "ModelRequest", "ModelResponse", "ModelRequest", "ModelResponse", "ModelRequest",
        "ModelResponse",
    ]  # fmt: skip
    assert back.history[-1].usage.output_tokens > 0


async def test_before_request_runs_before_every_model_request(openai_env: FakeOpenAIServer) -> None:
    class Counting(Session):
        calls = 0

        def _before_request(self) -> bool:
            Counting.calls += 1
            if Counting.calls == 3:
                raise RuntimeError("budget spent")
            return True

    openai_env.script(tool_call("lookup", {"key": "a"}), text("done"), tool_call("lookup", {}))
    counted = Counting(resolve_model("openai-chat:t", Config()), "", [LOOKUP])
    assert await counted.prompt("go") == "done"
    assert Counting.calls == 2 == len(openai_env.requests)
    with pytest.raises(RuntimeError, match="budget spent"):
        await counted.prompt("again")
    assert len(openai_env.requests) == 2  # the third request was never sent


# -- streaming -----------------------------------------------------------------------------------


async def test_a_streaming_session_emits_deltas_that_make_the_answer(
    openai_env: FakeOpenAIServer,
) -> None:
    openai_env.script(tool_call("lookup", {"key": "a"}), text("The value is a, as asked."))
    events: list[SessionEvent] = []
    streaming = session(stream=True, on_event=events.append)
    assert await streaming.prompt("go") == "The value is a, as asked."
    kinds = [e.kind for e in events]
    deltas = [e.data["text"] for e in events if e.kind == "delta"]
    assert len(deltas) > 1 and "".join(deltas) == "The value is a, as asked."
    assert kinds.index("delta") > kinds.index("tool_result")
    assert max(i for i, k in enumerate(kinds) if k == "delta") < kinds.index("text")
    assert all(r["stream"] is True for r in openai_env.requests)
    [usage] = [e for e in events if e.kind == "usage"]
    assert all(r.usage.input_tokens > 0 for r in usage.data["responses"])


class _BrokenStream(BaseHTTPRequestHandler):
    """Answers every chat request with one good SSE chunk, then one that is not JSON."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        good = {"choices": [{"index": 0, "delta": {"content": "partial "}}]}
        self.wfile.write(f"data: {json.dumps(good)}\n\ndata: {{not json\n\n".encode())


@pytest.fixture
def broken_stream() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _BrokenStream)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


async def test_a_malformed_stream_chunk_is_a_coded_error(
    broken_stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", broken_stream)
    events: list[SessionEvent] = []
    streaming = session(stream=True, on_event=events.append)
    with pytest.raises(ModelResponseError, match="not JSON") as caught:
        await streaming.prompt("go")
    assert caught.value.code == "bad_response"
    assert [e.data["text"] for e in events if e.kind == "delta"] == ["partial "]


@pytest.mark.parametrize(
    "line",
    ['data: {"choices": 5}', 'data: {"choices": [{"delta": 3}]}', "data: [1, 2]", "data: {oops"],
)
def test_every_malformed_chunk_shape_is_coded(line: str) -> None:
    with pytest.raises(ModelResponseError) as caught:
        StreamAccumulator().feed_line(line)
    assert caught.value.code == "bad_response"


def test_stream_chunks_join_into_text_tool_calls_and_usage() -> None:
    acc = StreamAccumulator()
    lines = [
        ": keep-alive",
        'data: {"model": "m", "choices": [{"index": 0, "delta": {"content": "he"}}]}',
        'data: {"choices": [{"index": 0, "delta": {"content": "llo"}}]}',
        'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1",'
        ' "function": {"name": "lookup", "arguments": "{\\"ke"}}]}}]}',
        'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,'
        ' "function": {"arguments": "y\\": 1}"}}]}}]}',
        'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2,'
        ' "prompt_tokens_details": {"cached_tokens": 4}}}',
    ]
    assert [acc.feed_line(line) for line in lines] == ["", "he", "llo", "", "", ""]
    assert acc.feed_line("data: [DONE]") is None
    reply = acc.finish()
    assert (reply.text, reply.calls, reply.model_name) == (
        "hello",
        [("c1", "lookup", '{"key": 1}')],
        "m",
    )
    assert (reply.input_tokens, reply.output_tokens, reply.cached_tokens) == (7, 2, 4)


# -- retries -------------------------------------------------------------------------------------


async def test_a_429_with_retry_after_is_retried_then_answers(openai_env: FakeOpenAIServer) -> None:
    openai_env.script(error(429, "slow down", retry_after=0), text("fine now"))
    assert await session().prompt("go") == "fine now"
    assert len(openai_env.requests) == 2
    openai_env.assert_all_consumed()


async def test_a_5xx_is_retried_and_a_script_gap_is_not(openai_env: FakeOpenAIServer) -> None:
    openai_env.script(error(503, "busy", retry_after=0), error(502, "still", retry_after=0))
    openai_env.script(text("recovered"))
    assert await session().prompt("go") == "recovered"
    assert len(openai_env.requests) == 3
    with pytest.raises(ModelHTTPError) as caught:  # x-should-retry: false is honoured
        await session().prompt("unscripted")
    assert caught.value.status_code == 500
    assert len(openai_env.requests) == 4


async def test_retries_run_out_with_the_last_error(openai_env: FakeOpenAIServer) -> None:
    openai_env.script(error(429, "slow down", retry_after=0, repeat=True))
    with pytest.raises(ModelHTTPError, match="slow down") as caught:
        await session().prompt("go")
    assert caught.value.status_code == 429
    assert len(openai_env.requests) == 3  # one request and two retries, as the openai SDK


def test_retry_after_is_read_in_seconds_or_milliseconds_and_capped() -> None:
    assert retry_wait({"retry-after": "2"}) == 2.0
    assert retry_wait({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_wait({"retry-after": "86400"}) == 60.0
    assert retry_wait({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_wait({}) is None


# -- cassettes -----------------------------------------------------------------------------------


def _function_model() -> FunctionModel:
    """The script the tests below give the fake server, as a pydantic-ai model."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        latest = messages[-1].parts[-1]
        if isinstance(latest, ToolReturnPart):
            return ModelResponse(parts=[TextPart("recorded answer")])
        return ModelResponse(parts=[ToolCallPart("lookup", '{"key": "a"}', "c1")])

    return FunctionModel(answer, model_name="t")


async def test_a_cassette_recorded_through_any_model_replays(
    openai_env: FakeOpenAIServer, tmp_path: Path
) -> None:
    written = {}
    for label in ("openai-chat", "function"):
        openai_env.script(
            tool_call("lookup", {"key": "a"}), text("recorded answer", when="value of a")
        )
        path = tmp_path / f"{label}.json"
        model = resolve_model("openai-chat:t", Config()) if label == "openai-chat" else None
        recording = RecordingModel(model or _function_model(), path)
        assert await Session(recording, "sys", [LOOKUP]).prompt("question") == "recorded answer"
        turns = json.loads(path.read_text())["turns"]
        assert turns[0]["match"] == "question" and turns[0]["tool_calls"][0]["name"] == "lookup"
        assert turns[1]["match"] == "value of a"
        replay = Session(ReplayModel(path), "sys", [LOOKUP])
        assert await replay.prompt("question") == "recorded answer"
        for turn in turns:
            for call in turn.get("tool_calls", ()):
                call.pop("id")  # the server numbers its calls
        written[label] = turns
    assert len(openai_env.requests) == 2  # one recording on the wire; the replays sent nothing
    assert written["openai-chat"] == written["function"]


# -- connections ---------------------------------------------------------------------------------


async def test_one_pooled_client_per_endpoint_and_no_ca_bundle_for_http(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ssl

    from kernos.runtime._models._lean_wire import shared_endpoint

    loaded: list[object] = []
    real = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loaded.append(args or kwargs)
        real(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    plain = shared_endpoint("http://127.0.0.1:9/v1", "k")
    assert plain is shared_endpoint("http://127.0.0.1:9/v1", "k")
    assert plain.client() is plain.client()
    assert loaded == []  # http:// never reads the CA bundle
    secure = shared_endpoint("https://127.0.0.1:9/v1", "k")
    assert secure.client() is not plain.client()
    assert len(loaded) == 1  # https:// reads it once, for its one client
    secure.client()
    assert len(loaded) == 1
    await plain.aclose()
    await secure.aclose()


# -- usage ---------------------------------------------------------------------------------------

_REPLIES = st.lists(
    st.builds(
        Reply,
        text=st.text(max_size=5),
        input_tokens=st.integers(0, 10**9),
        output_tokens=st.integers(0, 10**9),
        cached_tokens=st.integers(0, 10**9),
        model_name=st.none() | st.sampled_from(["replay", "gpt-4o", ""]),
        provider_name=st.none() | st.sampled_from(["openai", "anthropic"]),
    ),
    max_size=4,
)


@given(_REPLIES)
def test_usage_rows_read_from_the_answers_are_those_read_from_their_responses(
    replies: list[Reply],
) -> None:
    # the session records its usage from the answers (no pydantic-ai message per answer)
    assert reply_usage(replies) == response_usage(usage_responses(replies))
