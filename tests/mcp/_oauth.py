"""The OAuth login the MCP tests share: the config of ``[mcp.docs]`` against the test
authorization server (tests/mcp/oauth_server.py), ``kernos mcp login docs`` with a test HTTP
client as the person's browser, the stored token file, and a run that searches the docs."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx2

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests.conftest import KERNOS
from tests.mcp.conftest import kernos, kernos_env, toml_str
from tests.mcp.oauth_server import OAuthDocsServer

URL_LINE = re.compile(r"^(http://127\.0\.0\.1:\d+/authorize\?\S+)$", re.M)


def write_config(project: Path, docs: OAuthDocsServer, extra: str = "") -> None:
    (project / "kernos.toml").write_text(
        f'[mcp.docs]\nurl = {toml_str(docs.url)}\nauth = "oauth"\n{extra}'
    )


def token_file(project: Path) -> Path:
    return project / ".kernos" / "mcp-auth" / "docs.json"


def log_in(project: Path) -> subprocess.CompletedProcess[str]:
    """`kernos mcp login docs`, with a test HTTP client as the person's browser: it follows the
    printed authorization URL through the server's approval to kernos's loopback callback."""
    env = {k: v for k, v in kernos_env(project).items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    process = subprocess.Popen(
        [KERNOS, "mcp", "login", "docs"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    found = threading.Event()

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            if URL_LINE.match(line.strip()):
                found.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert found.wait(60), f"no authorization URL printed: {''.join(seen)}"
        url = next(m[1] for line in seen if (m := URL_LINE.match(line.strip())))
        with httpx2.Client(follow_redirects=True, timeout=30) as browser:
            page = browser.get(url)
        assert page.status_code == 200, page.text
        assert "kernos received the login for [docs]" in page.text
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(timeout=10)
    assert process.stdout is not None
    out = process.stdout.read()
    process.stdout.close()
    assert process.stderr is not None
    process.stderr.close()
    return subprocess.CompletedProcess(process.args, process.returncode, out, "".join(seen))


def run_search(project: Path, server: FakeOpenAIServer) -> subprocess.CompletedProcess[str]:
    server.script(
        tool_call("docs__search", '{"query": "oauth"}'),
        text("Two pages.", when="docs: 2 pages"),
    )
    return kernos("run", "Search the docs.", "-m", "openai-chat:x", cwd=project, env=server.env())


def expire_login(project: Path, docs: OAuthDocsServer) -> dict[str, Any]:
    """The stored login's time is up: the server refuses its access token, and the stored
    expiry says so. The token file's record as the login left it."""
    saved = token_file(project)
    record: dict[str, Any] = json.loads(saved.read_text())
    docs.auth.expire_access()
    saved.write_text(json.dumps({**record, "expires_at": time.time() - 10}))
    return record
