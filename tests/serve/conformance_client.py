"""kernos as the client of the MCP conformance suite's client scenarios (tests/serve/
test_conformance.py): the suite starts a scenario's server and runs this script with its URL as
the last argument and the scenario in ``MCP_CONFORMANCE_SCENARIO``.

The script points an ``[mcp.x]`` table at that URL in a fresh project and makes kernos use it as
a user would: ``kernos tools`` lists the server's tools (``initialize``, then ``tools/list``);
``kernos run`` with a scripted local model calls the tool the scenario offers. No terminal is
attached, so an elicitation is answered ``cancel`` (see the expected-failures file).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kernos.testing import FakeOpenAIServer, text, tool_call

#: the tool each scenario's server offers, and the arguments the scripted model sends
CALLS = {
    "tools_call": ("add_numbers", {"a": 2, "b": 3}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
    "sse-retry": ("test_reconnection", {}),
}


def main(url: str, scenario: str) -> int:
    kernos = str(Path(sys.executable).with_name("kernos"))
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "kernos.toml").write_text(
            f"[mcp.x]\nurl = {json.dumps(url)}\ntimeout = 30\n", encoding="utf-8"
        )
        env = {**os.environ, "KERNOS_HOME": str(project / ".kernos")}
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
    sys.exit(main(sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")))
