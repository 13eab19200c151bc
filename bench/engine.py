"""kernos's one session loop against the wire: ``.venv/bin/python bench/engine.py``.

A fast Chat Completions server (raw asyncio HTTP/1.1 keep-alive, one canned answer) runs in a
separate process, so only the client's CPU is measured. Against it, the same conversation (a
system message, then ``TURNS`` user turns each answered, history resent every turn) is driven by:

* ``raw``     — a pooled ``httpx2.AsyncClient``: ``json.dumps`` the body, POST, ``json.loads``;
* ``lean``    — kernos's lean wire alone (``ChatEndpoint.complete``), no session;
* ``pyd-ai``  — a pydantic-ai ``Agent`` on ``OpenAIChatModel`` alone, no kernos;
* ``kernos``  — ``kernos.runtime.Session`` on an ``OpenAIChatModel`` (the loop drives it over the
  pooled Chat Completions wire), recording every turn in a real SQLite store (as by default);
* ``kernos/adapted`` — the same session on a pydantic-ai model the loop asks through pydantic-ai's
  model interface (``runtime/_models/_model_adapter.py``; an ``OpenAIChatModel`` subclass, so the
  same wire as ``pyd-ai``), how every provider other than OpenAI-compatible ones runs.

kernos's targets (ratios of one run, at ``SESSIONS``): ``kernos`` >= 0.8x ``raw`` turns/s and
<= 1.3x its CPU per request; ``kernos/adapted`` is reported against ``pyd-ai``.
* ``kernos/window`` — ``kernos`` on a model with a known window (128,000 tokens, gpt-4o's in
  genai-prices): what compaction's counting adds to short conversations.
* ``kernos/nostore`` — ``kernos`` recording nothing (no store): what the store's writes and
  commits cost, by difference.

For each, at 1 session (``SERIAL`` conversations one after another) and at ``SESSIONS`` concurrent
conversations: turns/s (wall) and CPU ms per request (this process's CPU time / requests).
Variants are interleaved, each figure the median of ``--rounds`` (default 3). Options:
``--sessions N``, ``--rounds N``, ``--only NAME[,NAME]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

TURNS = 3
SERIAL = 60  # conversations one after another for the 1-session figures
SYSTEM = "Be brief."

_ANSWER = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok, noted.", "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }
).encode()
_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
    + f"Content-Length: {len(_ANSWER)}\r\n\r\n".encode()
    + _ANSWER
)
_LENGTH = re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")


# -- the server (its own process) -----------------------------------------------------------------


class _Answer(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            found = _LENGTH.search(self.buffer, 0, end + 2)
            size = int(found.group(1)) if found else 0
            if len(self.buffer) < end + 4 + size:
                return
            self.buffer = self.buffer[end + 4 + size :]
            self.transport.write(_RESPONSE)


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Answer, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def start_server() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    port = int(process.stdout.readline())
    return process, f"http://127.0.0.1:{port}/v1"


# -- the clients ----------------------------------------------------------------------------------

Conversation = Callable[[], Awaitable[None]]


def raw_factory(url: str) -> tuple[Callable[[], Conversation], Callable[[], Awaitable[None]]]:
    import httpx2

    client = httpx2.AsyncClient(
        headers={"Authorization": "Bearer k", "Content-Type": "application/json"},
        limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=1000),
        verify=False,
    )

    def conversation() -> Conversation:
        async def run() -> None:
            messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
            for n in range(TURNS):
                messages.append({"role": "user", "content": f"turn {n}"})
                body = json.dumps({"model": "bench", "messages": messages, "stream": False})
                response = await client.post(url + "/chat/completions", content=body.encode())
                answer = json.loads(response.content)["choices"][0]["message"]
                messages.append({"role": "assistant", "content": answer["content"]})

        return run

    return conversation, client.aclose


def lean_factory(url: str) -> tuple[Callable[[], Conversation], Callable[[], Awaitable[None]]]:
    from kernos.runtime._models._lean_wire import ChatEndpoint, request_body

    endpoint = ChatEndpoint(url, "k")

    def conversation() -> Conversation:
        async def run() -> None:
            messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
            for n in range(TURNS):
                messages.append({"role": "user", "content": f"turn {n}"})
                reply = await endpoint.complete("bench", request_body("bench", messages, "", False))
                messages.append({"role": "assistant", "content": reply.text})

        return run

    return conversation, endpoint.aclose


def pydantic_ai_factory(
    url: str,
) -> tuple[Callable[[], Conversation], Callable[[], Awaitable[None]]]:
    import pydantic_ai
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    pydantic_ai.BANNER_ENABLED = False
    provider = OpenAIProvider(base_url=url, api_key="k")
    agent = Agent(OpenAIChatModel("bench", provider=provider), instructions=SYSTEM)

    def conversation() -> Conversation:
        async def run() -> None:
            history: list[Any] = []
            for n in range(TURNS):
                result = await agent.run(f"turn {n}", message_history=history)
                history = result.all_messages()

        return run

    async def close() -> None:
        await provider.client.close()

    return conversation, close


def kernos_factory(
    adapted: bool, window: int | None = None, stored: bool = True
) -> Callable[[str], tuple[Callable[[], Conversation], Callable[[], Awaitable[None]]]]:
    def factory(url: str) -> tuple[Callable[[], Conversation], Callable[[], Awaitable[None]]]:
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        from kernos.compress import TranscriptCompactor
        from kernos.runtime import CompactSettings, Session, Store
        from kernos.runtime._models._lean_wire import shared_endpoint

        class AdaptedChatModel(OpenAIChatModel):
            """Not the pooled wire's: asked through pydantic-ai's model interface."""

        home = Path(tempfile.mkdtemp(prefix="kernos-bench-engine-"))
        store = Store(home / "kernos.db") if stored else None
        kind = AdaptedChatModel if adapted else OpenAIChatModel
        provider = OpenAIProvider(base_url=url, api_key="k")  # its client is this loop's
        model = kind("bench", provider=provider)
        compactor = TranscriptCompactor(lambda name: model)

        def conversation() -> Conversation:
            async def run() -> None:
                session = Session(model, SYSTEM, store=store)
                if window is not None:  # a known window: each request may be counted first
                    session.set_compaction(CompactSettings(window), compactor)
                for n in range(TURNS):
                    await session.prompt(f"turn {n}")

            return run

        async def close() -> None:
            if store is not None:
                await store.flushed()
                store.close()
            await shared_endpoint(url + "/", "k").aclose()
            await shared_endpoint(url, "k").aclose()
            await provider.client.close()

        return conversation, close

    return factory


VARIANTS: dict[str, Callable[[str], Any]] = {
    "raw": raw_factory,
    "lean": lean_factory,
    "pyd-ai": pydantic_ai_factory,
    "kernos": kernos_factory(adapted=False),
    "kernos/adapted": kernos_factory(adapted=True),
    # gpt-4o's window (genai-prices): what a known model adds to short conversations
    "kernos/window": kernos_factory(adapted=False, window=128_000),
    "kernos/nostore": kernos_factory(adapted=False, stored=False),
}


async def measure(make: Callable[[str], Any], url: str, sessions: int) -> tuple[float, float]:
    """(turns/s, CPU ms per request) of one variant at ``sessions`` concurrent conversations."""
    conversation, close = make(url)
    await conversation()()  # warm: imports, the first connection, the store's migrations
    count = SERIAL if sessions == 1 else sessions
    cpu, wall = time.process_time(), time.perf_counter()
    if sessions == 1:
        for _ in range(count):
            await conversation()()
    else:
        await asyncio.gather(*(conversation()() for _ in range(count)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await close()
    requests = count * TURNS
    return requests / wall, cpu * 1000 / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated variant names")
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve())
        return
    names = [n for n in VARIANTS if not args.only or n in args.only.split(",")]
    process, url = start_server()
    figures: dict[tuple[str, int], list[tuple[float, float]]] = {}
    try:
        for _ in range(args.rounds):
            for sessions in (1, args.sessions):
                for name in names:  # interleaved: every variant once per round and setting
                    done = asyncio.run(measure(VARIANTS[name], url, sessions))
                    figures.setdefault((name, sessions), []).append(done)
    finally:
        process.terminate()
        process.wait()
    print(f"median of {args.rounds} interleaved rounds; {TURNS} turns per conversation")
    print(f"{'variant':<15} {'sessions':>8} {'turns/s':>9} {'cpu ms/req':>11}")
    medians: dict[tuple[str, int], tuple[float, float]] = {}
    for (name, sessions), runs in figures.items():
        rate = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        medians[name, sessions] = (rate, cpu)
    for sessions in (1, args.sessions):
        for name in names:
            rate, cpu = medians[name, sessions]
            print(f"{name:<15} {sessions:>8} {rate:>9.1f} {cpu:>11.3f}")
    many = args.sessions
    for sessions in (1, many):
        if {"kernos", "raw"} <= set(names):
            (rate, cpu), (raw_rate, raw_cpu) = medians["kernos", sessions], medians["raw", sessions]
            print(
                f"at {sessions} sessions: kernos = {rate / raw_rate:.2f}x raw turns/s "
                f"(target >= 0.8), {cpu / raw_cpu:.2f}x raw CPU per request (target <= 1.3)"
            )
        if {"kernos/adapted", "pyd-ai"} <= set(names):
            (rate, cpu), (pyd_rate, pyd_cpu) = (
                medians["kernos/adapted", sessions],
                medians["pyd-ai", sessions],
            )
            print(
                f"at {sessions} sessions: kernos/adapted = {rate / pyd_rate:.2f}x pyd-ai turns/s, "
                f"{cpu / pyd_cpu:.2f}x its CPU per request"
            )


if __name__ == "__main__":
    main()
