"""``kernos init``: a ``kernos.toml`` for the model server found, which
``kernos config check`` accepts and ``kernos run`` uses; ``.kernos/`` in ``.gitignore``; an
existing config is never replaced without ``--force``.

The probes of the local ports run in a network namespace of their own (``unshare -n``), where
nothing else listens on 11434, 8000 or 8080 whatever runs on this machine."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer, text
from tests import _cli
from tests.conftest import KERNOS

_DROP = ("KERNOS_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL")


def _env(cwd: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in _DROP}
    return {**base, "KERNOS_HOME": str(cwd / ".kernos"), **(extra or {})}


def kernos(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return _cli.kernos(*args, cwd=cwd, env=_env(cwd, env), stdin=subprocess.DEVNULL, timeout=120)


def _netns_prefix() -> list[str]:
    """The command prefix that runs a process in a fresh network namespace with ``lo`` up."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("no unshare/ip to make a network namespace")
    prefix = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
    trial = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30)
    if trial.returncode != 0:
        pytest.skip(f"cannot make a network namespace: {trial.stderr.strip()}")
    return prefix


def test_init_writes_a_config_for_the_server_on_openai_base_url(tmp_path: Path) -> None:
    with FakeOpenAIServer(text("hello from the local model")) as server:
        done = kernos("init", "--json", cwd=tmp_path, env=server.env())
        assert done.returncode == 0, done.stderr
        record = json.loads(done.stdout)
        assert record["server"] == {
            "base_url": server.base_url,
            "model": "kernos-fake",
            "kind": "",
            "found_by": "OPENAI_BASE_URL",
            "api_key_env": "OPENAI_API_KEY",
        }
        assert record["default_model"] == "local" and record["template"] is False
        assert record["written"] == [str(tmp_path / "kernos.toml"), str(tmp_path / ".gitignore")]
        config = tomllib.loads((tmp_path / "kernos.toml").read_text(encoding="utf-8"))
        assert config["default_model"] == "local"
        assert config["models"]["local"] == {
            "model": "openai-chat:kernos-fake",
            "base_url": server.base_url,
            "api_key_env": "OPENAI_API_KEY",
        }
        assert (tmp_path / ".gitignore").read_text(encoding="utf-8") == ".kernos/\n"
        key = {"OPENAI_API_KEY": server.env()["OPENAI_API_KEY"]}  # no OPENAI_BASE_URL now
        check = kernos("config", "check", cwd=tmp_path, env=key)
        assert check.returncode == 0, check.stdout + check.stderr
        run = kernos("run", "say hello", cwd=tmp_path, env=key)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "hello from the local model"
        assert server.requests[0]["model"] == "kernos-fake"


def test_init_never_replaces_a_config_without_force(tmp_path: Path) -> None:
    mine = 'default_model = "openai-chat:mine"\n'
    (tmp_path / "kernos.toml").write_text(mine, encoding="utf-8")
    args = ("init", "--base-url", "http://127.0.0.1:9/v1", "--model", "qwen3")
    done = kernos(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'kernos.toml'} already exists: edit it, or pass --force to replace it"
    ]
    assert (tmp_path / "kernos.toml").read_text(encoding="utf-8") == mine
    assert not (tmp_path / ".gitignore").exists()
    forced = kernos(*args, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    config = tomllib.loads((tmp_path / "kernos.toml").read_text(encoding="utf-8"))
    assert config["models"]["local"]["model"] == "openai-chat:qwen3"


def test_the_gitignore_line_is_added_once(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("node_modules", encoding="utf-8")
    args = ("init", "--base-url", "http://127.0.0.1:9/v1", "--model", "qwen3", "--json")
    first = kernos(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / ".gitignore").read_text(encoding="utf-8") == "node_modules\n.kernos/\n"
    again = kernos(*args, "--force", cwd=tmp_path)
    assert json.loads(again.stdout)["written"] == [str(tmp_path / "kernos.toml")]
    assert (tmp_path / ".gitignore").read_text(encoding="utf-8") == "node_modules\n.kernos/\n"


def test_base_url_and_model_skip_probing_and_model_alone_is_refused(tmp_path: Path) -> None:
    alone = kernos("init", "--model", "qwen3", cwd=tmp_path)
    assert alone.returncode == 2
    assert "--model needs --base-url" in alone.stderr
    assert not (tmp_path / "kernos.toml").exists()
    with FakeOpenAIServer() as server:  # OPENAI_BASE_URL is there, and not asked
        done = kernos(
            "init", "--base-url", "http://127.0.0.1:9/v1/", "-m", "qwen3", "--json",
            cwd=tmp_path, env=server.env(),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    server_record = json.loads(done.stdout)["server"]
    assert server_record["base_url"] == "http://127.0.0.1:9/v1"
    assert server_record["found_by"] == "--base-url"
    check = kernos("config", "check", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_with_nothing_found_and_no_terminal_a_template_is_written(tmp_path: Path) -> None:
    prefix = _netns_prefix()
    done = subprocess.run(
        [*prefix, KERNOS, "init", "--json"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["template"] is True and record["server"] is None
    assert "no model server found: edit kernos.toml (uncomment default_model" in done.stderr
    written = (tmp_path / "kernos.toml").read_text(encoding="utf-8")
    assert "# default_model" in written and "# [models.local]" in written
    check = kernos("config", "check", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    # uncommented as the file says, with a model, it is a working config
    filled = written.replace("# default_model", "default_model")
    filled = filled.replace("# [models.local]", "[models.local]")
    filled = filled.replace('# model = "openai-chat:MODEL"', 'model = "openai-chat:qwen3"')
    filled = filled.replace("# base_url", "base_url")
    (tmp_path / "kernos.toml").write_text(filled, encoding="utf-8")
    check = kernos("config", "check", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "1 models" in check.stderr


_OLLAMA = """
import json, subprocess, sys
from kernos.testing import FakeOpenAIServer

with FakeOpenAIServer(port=11434):
    done = subprocess.run([sys.argv[1], "init", "--json"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=100)
print(json.dumps([done.returncode, done.stdout, done.stderr]))
"""


def test_a_server_on_the_ollama_port_is_found(tmp_path: Path) -> None:
    prefix = _netns_prefix()
    done = subprocess.run(
        [*prefix, sys.executable, "-c", textwrap.dedent(_OLLAMA), KERNOS],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    code, out, err = json.loads(done.stdout)
    assert code == 0, err
    server = json.loads(out)["server"]
    assert server == {
        "base_url": "http://127.0.0.1:11434/v1",
        "model": "kernos-fake",
        "kind": "Ollama",
        "found_by": "port 11434",
        "api_key_env": None,
    }


def _read_until(fd: int, marker: bytes, seen: bytearray) -> None:
    """Read the pty into ``seen`` until ``marker`` shows (the test's timeout bounds it)."""
    import select

    while marker not in seen:
        ready, _, _ = select.select([fd], [], [], 60)
        assert ready, f"no {marker!r} on the terminal; it showed: {bytes(seen)!r}"
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    assert marker in seen, f"no {marker!r} on the terminal; it showed: {bytes(seen)!r}"


@pytest.mark.timeout(150)
def test_on_a_terminal_with_nothing_found_it_asks(tmp_path: Path) -> None:
    prefix = _netns_prefix()
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [*prefix, KERNOS, "init"],
        cwd=tmp_path,
        env={**_env(tmp_path), "TERM": "dumb", "COLUMNS": "200"},
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    seen = bytearray()
    try:
        _read_until(leader, b"Base URL", seen)
        os.write(leader, b"http://127.0.0.1:9/v1\n")  # nothing listens: the model is asked
        _read_until(leader, b"Model name", seen)
        os.write(leader, b"qwen3\n")
        assert process.wait(timeout=100) == 0, bytes(seen)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)
    config = tomllib.loads((tmp_path / "kernos.toml").read_text(encoding="utf-8"))
    assert config["models"]["local"] == {
        "model": "openai-chat:qwen3",
        "base_url": "http://127.0.0.1:9/v1",
    }


def test_an_unreadable_gitignore_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").mkdir()  # a directory where the file should be
    done = kernos("init", "--base-url", "http://127.0.0.1:9/v1", "-m", "qwen3", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: {tmp_path / '.gitignore'}: kernos init: cannot read or write it "
        "(IsADirectoryError); check that it is a writable text file in a writable directory, "
        "then run it again"
    ]
    assert not (tmp_path / "kernos.toml").exists()
