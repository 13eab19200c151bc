"""kernos as the client of the MCP conformance suite's client scenarios (tests/serve/
test_conformance.py): the suite starts a scenario's server and runs this script with its URL as
the last argument and the scenario in ``MCP_CONFORMANCE_SCENARIO``.

The script points an ``[mcp.x]`` table at that URL in a fresh project and makes kernos use it as
a user would: ``kernos tools`` lists the server's tools (``initialize``, then ``tools/list``);
``kernos run`` with a scripted local model calls the tool the scenario offers. No terminal is
attached, so an elicitation is answered ``cancel`` (see the expected-failures file).

An ``auth/...`` scenario's server asks for OAuth: the table says ``auth = "oauth"`` (with the
pre-registered client the suite passes in ``MCP_CONFORMANCE_CONTEXT``, if any), ``kernos mcp
login x`` runs with an HTTP client as the person's browser (the suite's authorization server
redirects at once to kernos's loopback callback, as in tests/mcp/test_oauth.py), then ``kernos
run`` calls the server's tool. A call refused for more scope (a step-up) is what a person then
answers with a second login, which asks for the scopes the run was refused for, and a second run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx2

from kernos.testing import FakeOpenAIServer, text, tool_call

#: the tool each scenario's server offers, and the arguments the scripted model sends
CALLS = {
    "tools_call": ("add_numbers", {"a": 2, "b": 3}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
    "sse-retry": ("test_reconnection", {}),
}
#: the tool every auth scenario's server offers
AUTH_TOOL = "test-tool"
#: the client metadata document URL auth/basic-cimd expects the client to be configured with
#: (the suite's authorization server takes it on trust, without fetching it)
CIMD_URL = "https://conformance-test.local/client-metadata.json"
#: the variable the pre-registered client's secret is passed in
SECRET_ENV = "CONFORMANCE_CLIENT_SECRET"
_URL_LINE = re.compile(r"^(https?://\S+/authorize\?\S+)$")


def auth_table(scenario: str, context: dict[str, str]) -> str:
    """The ``[mcp.x]`` lines an auth scenario adds: OAuth, a pre-registered client or a client
    metadata document."""
    lines = ['auth = "oauth"']
    if scenario == "auth/basic-cimd":
        lines.append(f"client_metadata_url = {json.dumps(CIMD_URL)}")
    if "client_id" in context:
        lines.append(f"client_id = {json.dumps(context['client_id'])}")
    if "client_secret" in context:
        lines.append(f'client_secret_env = "{SECRET_ENV}"')
    return "".join(f"{line}\n" for line in lines)


def log_in(kernos: str, project: Path, env: dict[str, str]) -> int:
    """``kernos mcp login x``, an HTTP client following the printed URL as the browser."""
    env = {k: v for k, v in env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    process = subprocess.Popen(
        [kernos, "mcp", "login", "x"],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def browse() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            sys.stderr.write(line)
            if found := _URL_LINE.match(line.strip()):
                try:
                    with httpx2.Client(follow_redirects=True, timeout=30) as browser:
                        browser.get(found[1])
                except httpx2.HTTPError as exc:
                    sys.stderr.write(f"browser: {exc}\n")

    reader = threading.Thread(target=browse, daemon=True)
    reader.start()
    try:
        return process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(timeout=10)


def call(kernos: str, project: Path, env: dict[str, str], tool: str, args: object) -> int:
    """``kernos run`` with a scripted model that calls ``x``'s tool once."""
    with FakeOpenAIServer() as model:
        model.script(
            tool_call(f"x__{tool}", json.dumps(args)),
            text("done"),  # after the result, or after a refusal for want of a login
        )
        done = subprocess.run(
            [kernos, "run", "Use the tool.", "-m", "openai-chat:x"],
            cwd=project,
            env={**env, **model.env()},
            timeout=120,
        )
    return done.returncode


def wanted_scopes(project: Path) -> list[str]:
    """The scopes a refused call recorded for the next login (tools/_mcp_auth.py TokenFile)."""
    try:
        record = json.loads((project / ".kernos" / "mcp-auth" / "x.json").read_text())
    except (OSError, ValueError):
        return []
    return list(record.get("wanted_scopes") or [])


def authorize(kernos: str, project: Path, env: dict[str, str]) -> int:
    """An auth scenario: log in, call the tool; log in again once if the call needs more."""
    for _ in range(2):
        code = log_in(kernos, project, env)
        if code != 0:
            return code
        before = wanted_scopes(project)
        code = call(kernos, project, env, AUTH_TOOL, {})
        if code != 0 or wanted_scopes(project) == before:
            return code
    return 0


def main(url: str, scenario: str, context: dict[str, str]) -> int:
    kernos = str(Path(sys.executable).with_name("kernos"))
    oauth = scenario.startswith("auth/")
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "kernos.toml").write_text(
            f"[mcp.x]\nurl = {json.dumps(url)}\ntimeout = 30\n"
            + (auth_table(scenario, context) if oauth else ""),
            encoding="utf-8",
        )
        env = {**os.environ, "KERNOS_HOME": str(project / ".kernos")}
        if "client_secret" in context:
            env[SECRET_ENV] = context["client_secret"]
        if oauth:
            return authorize(kernos, project, env)
        if scenario not in CALLS:
            done = subprocess.run([kernos, "tools"], cwd=project, env=env, timeout=120)
            return done.returncode
        tool, args = CALLS[scenario]
        with FakeOpenAIServer() as model:
            model.script(
                tool_call(f"x__{tool}", json.dumps(args)),
                text("done", when="</tool-result-"),
            )
            done = subprocess.run(
                [kernos, "run", "Use the tool.", "-m", "openai-chat:x"],
                cwd=project,
                env={**env, **model.env()},
                timeout=120,
            )
        return done.returncode


if __name__ == "__main__":
    sys.exit(
        main(
            sys.argv[-1],
            os.environ.get("MCP_CONFORMANCE_SCENARIO", ""),
            json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}"),
        )
    )
