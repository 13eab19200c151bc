"""Tracing: OpenTelemetry spans for runs, prompts, model requests, tool calls and
children, exported over OTLP/HTTP to a loopback receiver that decodes the protobuf, as a collector
would."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from kernos.runtime._secrets import register_secrets
from kernos.runtime._trace import _trace
from kernos.testing import FakeOpenAIServer, text, tool_call
from tests._agents import CONFIG, agent_is
from tests._wait import wait_for
from tests.conftest import KERNOS

SECRET = "sk-kernos-trace-secret-0123456789"


# -- a loopback OTLP/HTTP receiver ----------------------------------------------------------------


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class Receiver:
    """``POST /v1/traces``: decodes each ExportTraceServiceRequest into plain span dicts."""

    def __init__(self, port: int = 0) -> None:
        self.spans: list[dict[str, Any]] = []
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.lock:
                    receiver.paths.append(self.path)
                    receiver.bodies.append(body)
                    for resource_spans in request.resource_spans:
                        resource = {
                            a.key: _value(a.value) for a in resource_spans.resource.attributes
                        }
                        for scope_spans in resource_spans.scope_spans:
                            for s in scope_spans.spans:
                                receiver.spans.append(
                                    {
                                        "name": s.name,
                                        "trace_id": s.trace_id.hex(),
                                        "span_id": s.span_id.hex(),
                                        "parent": s.parent_span_id.hex(),
                                        "attributes": {
                                            a.key: _value(a.value) for a in s.attributes
                                        },
                                        "links": [
                                            (link.trace_id.hex(), link.span_id.hex())
                                            for link in s.links
                                        ],
                                        "status": s.status.code,
                                        "resource": resource,
                                        "scope": scope_spans.scope.name,
                                    }
                                )
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def named(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.spans if s["name"] == name]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def run_env(tmp_path: Path, server: FakeOpenAIServer, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**base, **server.env(), "KERNOS_HOME": str(tmp_path / ".kernos"), **extra}


def by_id(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["span_id"]: s for s in spans}


def ancestors(span: dict[str, Any], index: dict[str, dict[str, Any]]) -> list[str]:
    names = []
    while span["parent"] in index:
        span = index[span["parent"]]
        names.append(span["name"])
    return names


# -- end to end ------------------------------------------------------------------------------------


def test_a_run_with_a_child_exports_the_span_tree(
    server: FakeOpenAIServer, receiver: Receiver, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    spawn = {"prompt": "Survey the repository.", "subagent_type": "explore", "name": "survey"}
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "survey it")),
        text("Found three modules.", when=agent_is("EXPLORE-AGENT")),
        text("The child found three modules.", when=agent_is("MAIN-AGENT", "three modules")),
    )
    env = run_env(
        tmp_path, server, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_SERVICE_NAME="kernos-under-test",
    )  # fmt: skip
    done = subprocess.run(
        [KERNOS, "run", "survey it", "-q"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "The child found three modules.\n"
    assert set(receiver.paths) == {"/v1/traces"}

    spans = receiver.spans
    index = by_id(spans)
    assert {s["resource"]["service.name"] for s in spans} == {"kernos-under-test"}
    assert len({s["trace_id"] for s in spans}) == 1  # one run, one trace

    (run,) = receiver.named("kernos.run")
    assert run["parent"] == ""
    assert run["attributes"]["kernos.agent"] == "main"
    assert run["attributes"]["kernos.model"] == "openai-chat:test"

    prompts = {s["attributes"]["kernos.agent"]: s for s in receiver.named("kernos.prompt")}
    assert sorted(prompts) == ["explore", "main"]
    assert prompts["main"]["parent"] == run["span_id"]

    # model requests come from pydantic-ai's instrumentation, inside each prompt
    chats = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
    assert len(chats) == 3
    for chat in chats:
        assert "kernos.prompt" in ancestors(chat, index)
        assert chat["attributes"]["gen_ai.response.model"]  # the answer's figures, once traced
        assert "gen_ai.usage.input_tokens" in chat["attributes"]

    (call,) = receiver.named("kernos.tool_call")
    assert call["attributes"]["kernos.tool"] == "task"
    assert call["attributes"]["kernos.is_error"] is False
    assert "kernos.prompt" in ancestors(call, index)
    assert ancestors(call, index)[-1] == "kernos.run"

    (child,) = receiver.named("kernos.task")
    assert child["attributes"]["kernos.status"] == "completed"
    assert child["attributes"]["kernos.task_id"].startswith("t_")
    assert (
        child["attributes"]["kernos.parent_session"]
        == prompts["main"]["attributes"]["kernos.session_id"]
    )
    assert child["links"] == [(call["trace_id"], call["span_id"])]  # linked to the spawning call
    assert child["parent"] == call["span_id"]
    assert prompts["explore"]["parent"] == child["span_id"]


def test_a_repaired_call_names_its_repairs_on_its_span(
    server: FakeOpenAIServer, receiver: Receiver, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    spawn = {"prompt": "Survey it.", "subagent_type": "explore", "category": "", "model": ""}
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "survey it")),
        text("Found three modules.", when=agent_is("EXPLORE-AGENT")),
        text("Done.", when=agent_is("MAIN-AGENT", "three modules")),
    )
    env = run_env(tmp_path, server, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    done = subprocess.run(
        [KERNOS, "run", "survey it", "-q"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (call,) = receiver.named("kernos.tool_call")
    attributes = call["attributes"]
    assert attributes["kernos.repairs"] == 2
    assert attributes["kernos.repaired_fields"] == "category, model"
    assert attributes["kernos.repair_rules"] == "padding, padding"


def test_secrets_never_leave_in_a_span(
    server: FakeOpenAIServer, receiver: Receiver, tmp_path: Path
) -> None:
    server.script(text(f"The key is {SECRET}."))
    env = run_env(
        tmp_path, server, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OPENAI_API_KEY=SECRET
    )
    done = subprocess.run(
        [KERNOS, "run", f"remember {SECRET}", "-m", "openai-chat:x", "-q"], cwd=tmp_path,
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert receiver.named("kernos.run")
    chats = [s for s in receiver.spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
    assert "[redacted]" in json.dumps(chats[0]["attributes"])  # the content was there, scrubbed
    assert all(SECRET.encode() not in body for body in receiver.bodies)


def _child_running(home: Path) -> bool:
    try:
        with sqlite3.connect(home / "kernos.db") as db:
            return [r[0] for r in db.execute("SELECT status FROM tasks")] == ["running"]
    except sqlite3.OperationalError:
        return False


def test_ctrl_c_still_flushes_the_spans(
    server: FakeOpenAIServer, receiver: Receiver, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(CONFIG, encoding="utf-8")
    gate = threading.Event()
    spawn = {"prompt": "Survey.", "subagent_type": "explore", "run_in_background": True}
    server.script(
        tool_call("task", spawn, when=agent_is("MAIN-AGENT", "survey it")),
        text("Started; waiting.", when=agent_is("MAIN-AGENT", "Started task")),
        text("never delivered", when=agent_is("EXPLORE-AGENT"), hold=gate),
    )
    home = tmp_path / ".kernos"
    env = run_env(tmp_path, server, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    proc = subprocess.Popen(
        [KERNOS, "run", "survey it", "-q"], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: _child_running(home), "the child to start", alive=[proc])
        proc.send_signal(signal.SIGINT)
        _, errors = proc.communicate(timeout=60)
    finally:
        gate.set()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, errors
    (run,) = receiver.named("kernos.run")
    assert run["status"] == 2  # STATUS_CODE_ERROR: the run was interrupted
    (child,) = receiver.named("kernos.task")
    assert child["attributes"]["kernos.status"] == "cancelled"


#: runs ``kernos`` with argv[2:] and writes the loaded module names to argv[1]
PROBE = """
import json, sys
from kernos.cli import main

report, sys.argv = sys.argv[1], ["kernos", *sys.argv[2:]]
try:
    main()
except SystemExit as exc:
    code = exc.code or 0
with open(report, "w", encoding="utf-8") as out:
    json.dump({"exit": code, "modules": sorted(sys.modules)}, out)
"""


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_nothing_is_sent_or_loaded_without_the_endpoint(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # the exporter's default endpoint is localhost:4318: listen there, so a stray export shows
    default = Receiver(4318) if _port_free(4318) else None
    try:
        server.script(text("Done."))
        report = tmp_path / "modules.json"
        env = run_env(tmp_path, server, OTEL_SERVICE_NAME="kernos-under-test")
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(report), "run", "hi", "-m", "openai-chat:x", "-q"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        loaded = json.loads(report.read_text(encoding="utf-8"))
        assert loaded["exit"] == 0, done.stderr
        assert done.stdout == "Done.\n"
        heavy = [
            m
            for m in loaded["modules"]
            if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))
        ]
        assert heavy == []
        if default is not None:
            assert default.bodies == []
    finally:
        if default is not None:
            default.close()


# -- the rules, without I/O ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "false"}, True),
    ],
)
def test_tracing_is_requested_by_the_standard_variables(
    environ: dict[str, str], expected: bool
) -> None:
    assert _trace.tracing_requested(environ) is expected


def test_attributes_are_prefixed_and_plain() -> None:
    given = {"tool": "task", "call_id": None, "n": 3, "ok": True, "p": Path("a")}
    assert _trace.attributes(given) == {
        "kernos.tool": "task", "kernos.n": 3, "kernos.ok": True, "kernos.p": "a",
    }  # fmt: skip


def test_message_content_follows_the_genai_variable() -> None:
    assert _trace.capture_content({}) is True
    flag = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    assert _trace.capture_content({flag: "false"}) is False


def test_the_exporter_scrubs_every_span_it_sends() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    register_secrets(SECRET)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_trace.scrubbing_exporter(memory)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(f"call {SECRET}", attributes={"a": SECRET}) as live:
        live.set_attribute("many", [f"x {SECRET}", "plain"])
        live.add_event("said", {"text": f"the key {SECRET}"})
        live.set_status(StatusCode.ERROR, f"failed with {SECRET}")
    (sent,) = memory.get_finished_spans()
    assert sent.name == "call [redacted]"
    assert dict(sent.attributes or {}) == {"a": "[redacted]", "many": ("x [redacted]", "plain")}
    assert dict(sent.events[0].attributes or {}) == {"text": "the key [redacted]"}
    assert sent.status.description == "failed with [redacted]"
    assert sent.context == live.get_span_context()
    provider.shutdown()


def test_the_off_span_is_one_shared_no_op() -> None:
    off = _trace._NO_SPAN
    with off as entered:
        entered.set(anything=1)
    assert entered is off
    assert not off.recording  # the loop gathers no figures for it
