"""``kernos mcp --http`` sessions are the SDK's: one kernos session per SDK-verified session,
closed on DELETE and after ``--session-idle``, at most ``--max-sessions``; 2026-07-28 requests
share one stateless session whatever ``Mcp-Session-Id`` they carry; ``[mcp.NAME]`` servers are
shared by the process unless ``per_session``; no session id in the log or on stderr."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import psutil
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from kernos._serve import hide_session_ids, session_tag
from kernos.testing import FakeOpenAIServer, text
from tests import _cli
from tests._wait import wait_for
from tests.mcp.conftest import RECORDER, toml_str
from tests.serve.conftest import server_command, server_env
from tests.serve.test_http import ACCEPT, INIT, free_port
from tests.serve.test_stdio import ERAS, only_text, statuses
from tests.tasks.tasks_helpers import agent_is

SESSION_ERA = "2025-11-25"
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
SHARED = "kernos-shared-recorder"  # markers on the MCP servers' command lines
PER_SESSION = "kernos-per-session-recorder"


def mcp_servers(project: Path, *, per_session: bool) -> str:
    """``[mcp.x]``, shared by the process, and (``per_session``) ``[mcp.y]``, one per session."""
    body = ""
    for name, marker, own in (("x", SHARED, False), ("y", PER_SESSION, True)):
        if own and not per_session:
            continue
        body += (
            f"\n[mcp.{name}]\ncommand = {toml_str(sys.executable)}\n"
            f"args = [{toml_str(RECORDER)}, {toml_str(marker)}]\n"
            f"env = {{ RECORD_FILE = {toml_str(project / f'{name}.jsonl')} }}\n"
            f"per_session = {'true' if own else 'false'}\n"
        )
    return body


@dataclass
class Served:
    url: str
    process: subprocess.Popen[bytes]
    project: Path

    def servers(self, marker: str) -> list[psutil.Process]:
        """The live MCP server processes under ``kernos mcp`` whose command line has ``marker``."""
        found = []
        for child in psutil.Process(self.process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):  # exited meanwhile, or a zombie
                if child.status() != psutil.STATUS_ZOMBIE and marker in " ".join(child.cmdline()):
                    found.append(child)
        return found

    def log(self) -> str:
        path = self.project / ".kernos" / "kernos.log"
        return path.read_text() if path.exists() else ""

    def stderr(self) -> str:
        return (self.project / "server.stderr").read_text()

    def opened(self) -> int:
        """How many kernos sessions ``kernos mcp`` opened so far (its log says each)."""
        return self.log().count(": opened session ")


@contextlib.contextmanager
def serve(project: Path, model: FakeOpenAIServer, *args: str) -> Iterator[Served]:
    port = free_port()
    stderr = (project / "server.stderr").open("w")
    process = subprocess.Popen(
        server_command("--http", f"127.0.0.1:{port}", *args),
        cwd=project,
        env=server_env(project, model),
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
    )
    served = Served(f"http://127.0.0.1:{port}/mcp", process, project)
    try:

        def listening() -> bool:
            assert process.poll() is None, served.stderr()
            with contextlib.suppress(httpx2.TransportError):
                httpx2.get(f"http://127.0.0.1:{port}/", timeout=0.5)
                return True
            return False

        wait_for(listening, "the server to listen")
        yield served
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # whatever is left of its group
            stderr.close()


# -- raw session-era requests ----------------------------------------------------------------


def open_session(url: str) -> str:
    """A session-era session (initialize + initialized) as raw HTTP; its id."""
    opened = httpx2.post(url, json=INIT, headers=ACCEPT, timeout=30)
    assert opened.status_code == 200, opened.text
    sid = opened.headers["mcp-session-id"]
    ack = httpx2.post(url, json=INITIALIZED, headers=session_headers(sid), timeout=30)
    assert ack.status_code == 202, ack.text
    return sid


def session_headers(sid: str) -> dict[str, str]:
    return {**ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": SESSION_ERA}


def list_tools(url: str, sid: str) -> httpx2.Response:
    return httpx2.post(url, json=LIST, headers=session_headers(sid), timeout=60)


def sse_result(response: httpx2.Response) -> dict[str, Any]:
    for line in response.text.splitlines():
        if line.startswith("data: "):
            return dict(json.loads(line[len("data: ") :]))
    return dict(response.json())


# -- one client cannot read another's tasks -----------------------------------------------------


@pytest.fixture
def shared_project(project: Path) -> Path:
    with (project / "kernos.toml").open("a") as config:
        config.write(mcp_servers(project, per_session=False))
    return project


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_cannot_read_another_clients_tasks(
    project: Path, server: FakeOpenAIServer, era: str
) -> None:
    server.script(text("VICTIM-ANSWER 7d1e", when=agent_is("EXPLORE-AGENT"), repeat=True))
    with serve(project, server) as served:
        ids: list[str] = []

        async def note_session(response: httpx2.Response) -> None:
            if sid := response.headers.get("mcp-session-id"):
                ids.append(sid)

        victim = httpx2.AsyncClient(event_hooks={"response": [note_session]})
        transport = streamable_http_client(served.url, http_client=victim)
        async with victim, Client(transport, mode="legacy") as a:
            start = {"prompt": "Find it.", "subagent_type": "explore", "run_in_background": True}
            said = only_text(await a.call_tool("task", start))
            assert said.startswith("Started task"), said
            (task_id,) = statuses(project)
            await asyncio.to_thread(
                wait_for, lambda: statuses(project)[task_id] == "completed", "the child to end"
            )
            own = await a.call_tool("task_output", {"task_id": task_id, "mode": "full"})
            assert "VICTIM-ANSWER 7d1e" in only_text(own)  # its owner reads it
            victim_id = ids[-1]

            # the other client: a session of its own, or a 2026-07-28 request with A's id header
            headers = {"mcp-session-id": victim_id} if era == "2026-07-28" else {}
            other = httpx2.AsyncClient(headers=headers)
            async with (
                other,
                Client(streamable_http_client(served.url, http_client=other), mode=era) as b,
            ):
                read = await b.call_tool("task_output", {"task_id": task_id, "mode": "full"})
                cancel = await b.call_tool("task_cancel", {"task_id": task_id})
        for result in (read, cancel):
            assert result.is_error
            assert only_text(result).startswith(f'No task "{task_id}" in this conversation.')
            assert "VICTIM-ANSWER" not in only_text(result)
        # no session id in the log or on stderr; a tag instead
        for shown in (served.log(), served.stderr()):
            assert victim_id not in shown
        assert f"http session {session_tag(victim_id)}: opened session" in served.log()


async def test_made_up_ids_on_2026_requests_attach_to_nothing_and_open_nothing(
    project: Path, server: FakeOpenAIServer
) -> None:
    with serve(project, server) as served:
        for made_up in ("0" * 32, "f" * 32, "made-up"):
            http = httpx2.AsyncClient(headers={"mcp-session-id": made_up})
            async with (
                http,
                Client(
                    streamable_http_client(served.url, http_client=http), mode="2026-07-28"
                ) as c,
            ):
                assert "task" in {t.name for t in (await c.list_tools()).tools}
        assert served.opened() == 1  # the one stateless session, not one per header
        assert "mcp http: opened session" in served.log()


def test_a_made_up_session_id_is_the_sdks_404_and_opens_no_kernos_session(
    project: Path, server: FakeOpenAIServer
) -> None:
    with serve(project, server) as served:
        made_up = "0123456789abcdef0123456789abcdef"
        refused = list_tools(served.url, made_up)
        assert refused.status_code == 404
        assert "Session not found" in refused.text
        sid = open_session(served.url)
        assert list_tools(served.url, sid).status_code == 200
        assert served.opened() == 1  # the real session only
        assert made_up not in served.log() + served.stderr()


# -- closing, limits ------------------------------------------------------------------------------


def test_delete_closes_the_session_and_stops_its_per_session_mcp_server(
    project: Path, server: FakeOpenAIServer
) -> None:
    with (project / "kernos.toml").open("a") as config:
        config.write(mcp_servers(project, per_session=True))
    with serve(project, server) as served:
        sid = open_session(served.url)
        listed = sse_result(list_tools(served.url, sid))["result"]["tools"]
        names = {tool["name"] for tool in listed}
        assert {"x__lookup", "y__lookup"} <= names
        assert len(served.servers(PER_SESSION)) == 1
        assert len(served.servers(SHARED)) == 1
        gone = httpx2.delete(served.url, headers=session_headers(sid), timeout=30)
        assert gone.status_code == 200
        # the session's own server exits, the shared one stays
        wait_for(lambda: served.servers(PER_SESSION) == [], "the per-session server to exit")
        assert len(served.servers(SHARED)) == 1
        assert ": closing session " in served.log()
        assert list_tools(served.url, sid).status_code == 404


def test_delete_cancels_the_sessions_unfinished_children(
    project: Path, server: FakeOpenAIServer
) -> None:
    release = threading.Event()
    server.script(text("never", when=agent_is("EXPLORE-AGENT"), hold=release))
    try:
        with serve(project, server) as served:
            sid = open_session(served.url)
            args = {"prompt": "Work long.", "subagent_type": "explore", "run_in_background": True}
            call = {**LIST, "method": "tools/call", "params": {"name": "task", "arguments": args}}
            started = httpx2.post(served.url, json=call, headers=session_headers(sid), timeout=60)
            assert "Started task" in json.dumps(sse_result(started))
            (task_id,) = wait_for(lambda: statuses(project), "the child to be recorded")
            wait_for(lambda: statuses(project)[task_id] == "running", "the child to run")
            httpx2.delete(served.url, headers=session_headers(sid), timeout=30)
            wait_for(lambda: statuses(project)[task_id] == "cancelled", "the child to be cancelled")
    finally:
        release.set()


def test_an_idle_session_is_closed_after_session_idle(
    project: Path, server: FakeOpenAIServer
) -> None:
    with (project / "kernos.toml").open("a") as config:
        config.write(mcp_servers(project, per_session=True))
    with serve(project, server, "--session-idle", "1s") as served:
        sid = open_session(served.url)
        assert list_tools(served.url, sid).status_code == 200
        assert len(served.servers(PER_SESSION)) == 1
        wait_for(lambda: served.servers(PER_SESSION) == [], "the idle session to close")
        assert list_tools(served.url, sid).status_code == 404
        assert len(served.servers(SHARED)) == 1


def test_past_max_sessions_a_new_client_gets_503_and_room_comes_back(
    project: Path, server: FakeOpenAIServer
) -> None:
    with serve(project, server, "--max-sessions", "2") as served:
        first, second = open_session(served.url), open_session(served.url)
        for sid in (first, second):
            assert list_tools(served.url, sid).status_code == 200
        third = httpx2.post(served.url, json=INIT, headers=ACCEPT, timeout=30)
        assert third.status_code == 503
        assert "Too many open sessions" in third.text
        assert "mcp-session-id" not in third.headers
        assert served.opened() == 2
        gone = httpx2.delete(served.url, headers=session_headers(first), timeout=30)
        assert gone.status_code == 200
        wait_for(lambda: served.log().count(": closing session ") == 1, "the session to close")
        again = open_session(served.url)
        assert sse_result(list_tools(served.url, again))["result"]["tools"]


def test_fifteen_sessions_share_one_mcp_server_process(
    shared_project: Path, server: FakeOpenAIServer
) -> None:
    with serve(shared_project, server) as served:
        for _ in range(15):
            sid = open_session(served.url)
            listed = sse_result(list_tools(served.url, sid))["result"]["tools"]
            assert "x__lookup" in {tool["name"] for tool in listed}
        assert served.opened() == 15
        assert len(served.servers(SHARED)) == 1


# -- the cli and the pure rules -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--session-idle", "soon"], "--session-idle: 'soon' is not a duration"),
        (["--max-sessions", "0"], "--max-sessions 0: give a whole number of 1 or more"),
    ],
)
def test_bad_session_flags_are_exit_2(
    project: Path, server: FakeOpenAIServer, args: list[str], message: str
) -> None:
    result = _cli.kernos(
        "mcp",
        "--http",
        "127.0.0.1:0",
        *args,
        cwd=project,
        env=server_env(project, server),
        timeout=60,
    )
    assert result.returncode == 2
    assert message in result.stderr


def test_session_ids_are_shown_as_tags() -> None:
    sid = "0123456789abcdef0123456789abcdef"
    tag = session_tag(sid)
    assert len(tag) == 8 and tag != session_tag(sid[::-1])
    assert hide_session_ids(f"Session {sid} crashed") == f"Session <session {tag}> crashed"
    shown = hide_session_ids("Rejected request with unknown or expired session ID: made-up")
    assert "made-up" not in shown
