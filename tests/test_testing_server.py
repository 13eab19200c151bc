"""kernos.testing.FakeOpenAIServer against the real peers that will talk to it.

The openai SDK and pydantic-ai's OpenAIChatModel are the clients kernos and its users run, so every
behaviour here is checked through one of them (or a subprocess), not by calling the handler.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import kernos.testing
from kernos.testing import FakeOpenAIServer, Reply, text, tool_call, tool_calls
from tests._wait import wait_for


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def client(server: FakeOpenAIServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="test-key") as sdk:
        yield sdk


def make_agent(server: FakeOpenAIServer, **kwargs: Any) -> Agent[None, str]:
    provider = OpenAIProvider(base_url=server.base_url, api_key="test-key")
    return Agent(OpenAIChatModel("gpt-test", provider=provider), **kwargs)


def user(content: str) -> list[Any]:
    return [{"role": "user", "content": content}]


# -- the public surface ------------------------------------------------------------------------


def test_public_surface_is_small_and_sorted() -> None:
    assert kernos.testing.__all__ == sorted(kernos.testing.__all__)
    assert set(kernos.testing.__all__) == {
        "FakeOpenAIServer",
        "Reply",
        "error",
        "text",
        "tool_call",
        "tool_calls",
    }


def test_reply_helpers_encode_arguments() -> None:
    assert text("hi") == Reply(content="hi")
    assert tool_call("task", {"prompt": "x"}).calls == (("task", '{"prompt": "x"}'),)
    assert tool_call("task").calls == (("task", "{}"),)
    assert tool_call("task", '{"prompt": ').calls == (("task", '{"prompt": '),)
    both = tool_calls(("a", {"n": 1}), ("b", "{bad"))
    assert both.calls == (("a", '{"n": 1}'), ("b", "{bad"))
    with pytest.raises(ValueError, match="at least one"):
        tool_calls()
    with pytest.raises(ValueError, match="content or at least one tool call"):
        Reply()


# -- non-streamed answers ----------------------------------------------------------------------


def test_text_answer_is_a_correct_chat_completion(
    server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(text("hello there"))
    response = client.chat.completions.create(model="my-model", messages=user("hi"))

    assert response.object == "chat.completion"
    assert response.id.startswith("chatcmpl-")
    assert response.model == "my-model"
    assert response.created > 0
    choice = response.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.content == "hello there"
    assert choice.message.tool_calls is None
    assert response.usage is not None
    assert response.usage.completion_tokens >= 1
    assert response.usage.total_tokens == (
        response.usage.prompt_tokens + response.usage.completion_tokens
    )
    assert server.requests == [{"model": "my-model", "messages": user("hi")}]
    assert server.auth_headers == ["Bearer test-key"]


def test_tool_calls_carry_unique_ids_and_exact_argument_strings(
    server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(tool_calls(("a", {"n": 1}), ("b", '{"n": ')), tool_call("c", {"x": "é"}))
    first = client.chat.completions.create(model="m", messages=user("go"))
    second = client.chat.completions.create(model="m", messages=user("again"))

    assert first.choices[0].finish_reason == "tool_calls"
    assert first.choices[0].message.content is None
    calls = [
        *(first.choices[0].message.tool_calls or ()),
        *(second.choices[0].message.tool_calls or ()),
    ]
    assert [(c.type, c.function.name, c.function.arguments) for c in calls] == [
        ("function", "a", '{"n": 1}'),
        ("function", "b", '{"n": '),
        ("function", "c", '{"x": "é"}'),
    ]
    ids = [c.id for c in calls]
    assert len(set(ids)) == 3
    assert all(i.startswith("call_") for i in ids)


async def test_pydantic_ai_text_answer(server: FakeOpenAIServer) -> None:
    server.script(text("Paris."))
    result = await make_agent(server).run("Capital of France?")

    assert result.output == "Paris."
    assert server.requests[0]["model"] == "gpt-test"
    assert server.requests[0]["messages"][-1] == {"role": "user", "content": "Capital of France?"}
    server.assert_all_consumed()


async def test_pydantic_ai_tool_round_trip(server: FakeOpenAIServer) -> None:
    agent = make_agent(server)
    ran: list[tuple[int, int]] = []

    @agent.tool_plain
    def add(a: int, b: int) -> str:
        ran.append((a, b))
        return f"sum={a + b}"

    server.script(tool_call("add", {"a": 2, "b": 3}), text("It is 5."))
    result = await agent.run("What is 2 + 3?")

    assert result.output == "It is 5."
    assert ran == [(2, 3)]
    assert server.tool_results() == ["sum=5"]
    # the tool result came back under the id the server gave the call
    assistant, tool = server.requests[1]["messages"][-2:]
    assert tool["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert server.requests[0]["tools"][0]["function"]["name"] == "add"
    server.assert_all_consumed()


async def test_malformed_raw_arguments_get_a_retry_prompt(server: FakeOpenAIServer) -> None:
    agent = make_agent(server)
    ran: list[int] = []

    @agent.tool_plain
    def double(n: int) -> int:
        ran.append(n)
        return n * 2

    server.script(tool_call("double", '{"n": '), tool_call("double", {"n": 4}), text("8"))
    result = await agent.run("double 4")

    assert result.output == "8"
    assert ran == [4]
    # pydantic-ai answered the broken call with a retry prompt carrying the JSON error
    retry = server.requests[1]["messages"][-1]
    assert retry["role"] == "tool"
    assert json.loads(retry["content"])["error"][0]["type"] == "json_invalid"
    assert server.tool_results() == [retry["content"], "8"]


# -- streaming -----------------------------------------------------------------------------------


def test_stream_splits_text_and_reports_usage(
    server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(text("one two three four five"))
    stream = client.chat.completions.create(
        model="m", messages=user("hi"), stream=True, stream_options={"include_usage": True}
    )
    with stream:
        chunks = list(stream)

    assert all(c.object == "chat.completion.chunk" and c.model == "m" for c in chunks)
    deltas = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(deltas) > 1
    assert "".join(deltas) == "one two three four five"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1


def test_stream_tool_calls_open_with_id_and_name(
    server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(tool_calls(("task", {"prompt": "explore the repo"}), ("task", '{"prompt": ')))
    with client.chat.completions.create(model="m", messages=user("hi"), stream=True) as stream:
        chunks = list(stream)

    assert all(c.usage is None for c in chunks)  # no usage chunk unless asked for
    parts = [call for c in chunks for call in (c.choices[0].delta.tool_calls or ())]
    by_index: dict[int, list[Any]] = {}
    for part in parts:
        by_index.setdefault(part.index, []).append(part)
    assert sorted(by_index) == [0, 1]
    for index, expected in [(0, '{"prompt": "explore the repo"}'), (1, '{"prompt": ')]:
        opening, *rest = by_index[index]
        assert opening.id.startswith("call_")
        assert opening.function.name == "task"
        assert all(p.id is None and p.function.name is None for p in rest)
        assert len(rest) > 1
        assert "".join(p.function.arguments for p in by_index[index]) == expected
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_pydantic_ai_run_stream(server: FakeOpenAIServer) -> None:
    server.script(text("streamed answer, in pieces"))
    async with make_agent(server).run_stream("hi") as run:
        output = await run.get_output()

    assert output == "streamed answer, in pieces"
    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}


async def test_async_sdk_stream_ends_with_done(server: FakeOpenAIServer) -> None:
    server.script(text("abc"))
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k") as sdk:
        stream = await sdk.chat.completions.create(model="m", messages=user("x"), stream=True)
        async with stream:
            text_parts = [c.choices[0].delta.content or "" async for c in stream]
    assert "".join(text_parts) == "abc"


# -- matching --------------------------------------------------------------------------------------


def test_first_matching_reply_wins_and_repeat_is_never_consumed(
    server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(
        text("for beta", when="beta"),
        text("always", repeat=True),
        text("never reached"),
    )

    def ask(content: str) -> str | None:
        return (
            client.chat.completions.create(model="m", messages=user(content))
            .choices[0]
            .message.content
        )

    assert ask("alpha") == "always"
    assert ask("beta") == "for beta"
    assert ask("beta") == "always"
    assert ask("gamma") == "always"
    with pytest.raises(
        AssertionError, match=r"1 scripted replies were never used:\n  - text 'never"
    ):
        server.assert_all_consumed()


def test_when_matches_latest_message_system_or_callable(
    server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(
        text("child", when="you are a child agent", when_system=True),
        text("tool seen", when="result: 42"),
        text("big model", when=lambda request: request["model"] == "big"),
    )
    history = [
        {"role": "user", "content": "result: 42 is old news"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "next"},
    ]

    def ask(messages: list[Any], model: str = "m") -> str | None:
        return (
            client.chat.completions.create(model=model, messages=messages)
            .choices[0]
            .message.content
        )

    # "result: 42" is in the history, not the latest message: nothing matches yet
    with pytest.raises(openai.InternalServerError):
        ask(history)
    assert (
        ask([{"role": "system", "content": "You are a child agent"}, *user("hi")], "big")
        == "big model"
    )
    assert ask([{"role": "system", "content": "you are a child agent"}, *user("hi")]) == "child"
    tool_turn = [
        *user("go"),
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "result: 42"}]},
    ]
    assert ask(tool_turn) == "tool seen"
    server.assert_all_consumed()


async def test_when_routes_two_concurrent_conversations(server: FakeOpenAIServer) -> None:
    server.delay = 0.05  # keep both conversations in flight at once
    agent = make_agent(server)

    @agent.tool_plain
    def lookup(key: str) -> str:
        return f"value of {key}"

    # scripted in an order that would cross the conversations if routing were ignored
    server.script(
        tool_call("lookup", {"key": "beta"}, when="about beta"),
        tool_call("lookup", {"key": "alpha"}, when="about alpha"),
        text("beta done", when="value of beta"),
        text("alpha done", when="value of alpha"),
    )
    alpha, beta = await asyncio.gather(agent.run("tell me about alpha"), agent.run("about beta?"))

    assert (alpha.output, beta.output) == ("alpha done", "beta done")
    assert sorted(server.tool_results()) == ["value of alpha", "value of beta"]
    server.assert_all_consumed()


# -- failures a test should see --------------------------------------------------------------------


def test_unmatched_request_is_a_500_naming_the_latest_message(
    server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(text("only for cats", when="cat"))
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="m", messages=user("dogs " + "x" * 300))

    assert "the script has no reply" in str(caught.value)
    assert "dogs xxx" in str(caught.value)
    assert len(server.requests) == 1  # the SDK was told not to retry
    [message] = server.unmatched
    assert "dogs " + "x" * 195 + "'" in message  # the latest message, cut at 200 characters
    with pytest.raises(AssertionError, match="only for cats"):
        server.assert_all_consumed()


async def test_unmatched_request_fails_a_pydantic_ai_run(server: FakeOpenAIServer) -> None:
    with pytest.raises(ModelHTTPError) as caught:
        await make_agent(server).run("unscripted question")

    assert caught.value.status_code == 500
    assert server.unmatched and "unscripted question" in server.unmatched[0]


def test_a_failing_when_callable_is_reported(
    server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    def broken(request: dict[str, Any]) -> bool:
        raise KeyError("nope")

    server.script(text("x", when=broken))
    with pytest.raises(openai.InternalServerError, match="matching the script failed: KeyError"):
        client.chat.completions.create(model="m", messages=user("hi"))


def test_models_listing_and_unknown_paths(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["kernos-fake"]

    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(server.base_url + "/embeddings", data=b"{}", timeout=5)
    with caught.value as response:
        assert response.code == 404
        assert response.headers["Content-Type"] == "application/json"
        assert "not '/v1/embeddings'" in json.loads(response.read())["error"]["message"]

    bad = urllib.request.Request(server.base_url + "/chat/completions", data=b"{nope")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(bad, timeout=5)
    with caught.value as response:
        assert response.code == 400
    assert server.requests == []


# -- lifecycle, environment, concurrency -----------------------------------------------------------


def test_lifecycle() -> None:
    fake = FakeOpenAIServer(text("preloaded"))
    with pytest.raises(RuntimeError, match="not running"):
        _ = fake.base_url
    fake.start()
    try:
        with pytest.raises(RuntimeError, match="already running"):
            fake.start()
        assert fake.base_url.startswith("http://127.0.0.1:")
        assert fake.base_url.endswith("/v1")
        assert fake.env() == {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "test-key"}
    finally:
        fake.stop()
    fake.stop()  # twice is fine
    with pytest.raises(AssertionError, match="preloaded"):
        fake.assert_all_consumed()


def test_the_server_binds_the_host_given_and_records_each_request_s_peer() -> None:
    """``host=`` binds another address (a virtual link's, in the network-namespace tests);
    ``clients`` names where each request came from."""
    program = (
        "import http.client, json, sys\n"
        "host, port = sys.argv[1].split('//')[1].split('/')[0].split(':')\n"
        "for source in ('127.0.0.3', '127.0.0.4'):\n"
        "    c = http.client.HTTPConnection(host, int(port), source_address=(source, 0))\n"
        "    body = json.dumps({'model': 'x', 'messages': [{'role': 'user', 'content': 'hi'}]})\n"
        "    c.request('POST', '/v1/chat/completions', body)\n"
        "    assert c.getresponse().status == 200\n"
    )
    with FakeOpenAIServer(text("one"), text("two"), host="127.0.0.2") as fake:
        assert fake.base_url.startswith("http://127.0.0.2:")
        subprocess.run(  # a subprocess: this test process may connect to 127.0.0.1 only
            [sys.executable, "-c", program, fake.base_url], timeout=60, check=True
        )
        assert len(fake.requests) == 2
        assert fake.clients == ["127.0.0.3", "127.0.0.4"]


def test_subprocess_reaches_the_server_through_env(server: FakeOpenAIServer) -> None:
    server.script(text("from the fake"))
    program = (
        "import openai\n"
        "with openai.OpenAI() as c:\n"
        "    messages = [{'role': 'user', 'content': 'sub'}]\n"
        "    r = c.chat.completions.create(model='x', messages=messages)\n"
        "print(r.choices[0].message.content)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        env={**server.env(), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "from the fake"
    assert server.auth_headers == ["Bearer test-key"]


def test_concurrent_requests_are_all_answered_and_recorded(server: FakeOpenAIServer) -> None:
    # every answer is held until all 16 requests have arrived: only a server that handles them
    # side by side gets there (no timing involved)
    release = threading.Event()
    server.script(*(text(f"answer {n}", when=f"<question {n}>", hold=release) for n in range(16)))
    answers: dict[int, str | None] = {}

    with openai.OpenAI(base_url=server.base_url, api_key="k") as sdk:

        def ask(n: int) -> None:
            response = sdk.chat.completions.create(model="m", messages=user(f"<question {n}>"))
            answers[n] = response.choices[0].message.content

        threads = [threading.Thread(target=ask, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        wait_for(lambda: len(server.requests) == 16, "16 requests held at once")
        assert answers == {}
        release.set()
        for thread in threads:
            thread.join()

    assert answers == {n: f"answer {n}" for n in range(16)}
    server.assert_all_consumed()


def test_a_held_reply_waits_without_blocking_others(server: FakeOpenAIServer) -> None:
    release = threading.Event()
    server.script(text("held", when="slow one", hold=release), text("quick", when="fast one"))
    answers: list[str | None] = []
    with openai.OpenAI(base_url=server.base_url, api_key="k") as sdk:

        def ask(question: str) -> None:
            response = sdk.chat.completions.create(model="m", messages=user(question))
            answers.append(response.choices[0].message.content)

        slow = threading.Thread(target=ask, args=("slow one",))
        slow.start()
        ask("fast one")
        assert answers == ["quick"]
        release.set()
        slow.join()
    assert answers == ["quick", "held"]


def test_delay_is_applied_before_each_answer(
    server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(text("slow"))
    server.delay = 0.3
    started = time.monotonic()
    client.chat.completions.create(model="m", messages=user("hi"))
    assert time.monotonic() - started >= 0.3


def test_requests_are_a_copy(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    server.script(text("a"))
    client.chat.completions.create(model="m", messages=user("hi"))
    server.requests[0]["messages"].clear()
    assert server.requests[0]["messages"] == user("hi")


def test_error_reply_sends_the_status_and_echoes_the_key(
    server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(kernos.testing.error(401, "Incorrect API key provided: {api_key}."))
    with pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(model="m", messages=user("hi"))
    assert caught.value.status_code == 401
    assert "Incorrect API key provided: test-key." in str(caught.value)
    server.assert_all_consumed()
    with pytest.raises(ValueError, match="HTTP error status"):
        kernos.testing.error(200, "fine")
