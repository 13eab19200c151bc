"""Plugins and configuration: kinds and hooks come from entry points; tables are validated."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from kernos.output import OutputKernel, build_channel, channel_kinds, load_hooks
from kernos.runtime import ConfigError, load_config


def config_error(name: str, table: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as caught:
        build_channel(name, table)
    return str(caught.value)


def test_an_unknown_key_names_the_channel_the_key_and_the_accepted_keys() -> None:
    message = config_error("hook", {"kind": "webhook", "url": "http://127.0.0.1/", "retries": 3})
    assert message == (
        "(config): channels.hook.retries: unknown key 'retries' for channel 'hook' (kind "
        "webhook); accepted keys: kind, description, url, headers, timeout"
    )


@pytest.mark.parametrize(
    ("name", "table", "fragment"),
    [
        (
            "log",
            {"path": "x"},
            "channels.log.kind: is missing; add kind = one of: apprise, console",
        ),
        ("log", {"kind": "fax"}, "unknown channel kind 'fax'"),
        ("has space", {"kind": "console"}, "channel name 'has space' is not valid"),
        ("x" * 47, {"kind": "console"}, "use 1-46 letters"),
        ("log", {"kind": "file"}, "channels.log.path: channel 'log' needs 'path'"),
        ("hook", {"kind": "webhook", "url": "ftp://x"}, "must be an http:// or https:// URL"),
        ("hook", {"kind": "webhook", "url": "http://h", "timeout": -1}, "positive number"),
        ("mail", {"kind": "email", "from": "a@b", "starttls": "yes"}, "must be true or false"),
        ("n", {"kind": "apprise", "urls": ["not a url"]}, "entry 1 is not a URL Apprise"),
        ("t", {"kind": "console", "description": ""}, "description: must be a non-empty string"),
    ],
)
def test_bad_tables_are_config_errors(name: str, table: dict[str, object], fragment: str) -> None:
    assert fragment in config_error(name, table)


def test_config_errors_never_show_secret_values() -> None:
    message = config_error(
        "qq", {"kind": "onebot", "base_url": "ws://x", "access_token": "tok-987654321"}
    )
    assert "tok-987654321" not in message


def test_from_config_builds_channels_authorizations_and_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "env-token-value")
    (tmp_path / "kernos.toml").write_text(
        textwrap.dedent("""
        [output]
        max_items = 3
        [agents.bot]
        allowed_outputs = ["log"]
        [channels.log]
        kind = "file"
        description = "Audit log."
        path = "out/log.jsonl"
        [channels.hook]
        kind = "webhook"
        url = "http://127.0.0.1:9/hook"
        headers = { Authorization = "Bearer ${HOOK_TOKEN}" }
        """)
    )
    kernel = OutputKernel.from_config(load_config(cwd=tmp_path), hooks=())
    assert list(kernel.channels) == ["log", "hook"]
    assert kernel.channels["log"].description == "Audit log."
    assert kernel.channels["log"].kind == "file"
    assert "env-token-value" in kernel.channels["hook"].secrets
    assert [c.name for c in kernel.channels_for("bot")] == ["log"]
    assert kernel.max_items == 3


def test_a_config_error_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text('[channels.log]\nkind = "file"\npth = "x"\n')
    with pytest.raises(ConfigError) as caught:
        OutputKernel.from_config(load_config(cwd=tmp_path))
    assert caught.value.file == str(tmp_path / "kernos.toml")
    assert caught.value.key == "channels.log.pth"


def install_plugin(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real installed distribution on sys.path: a module and its entry points."""
    (root / "kernos_demo_plugin.py").write_text(
        textwrap.dedent("""
        from kernos.output import Channel, OutputBlocked, OutputHook

        SENT = []

        def pager_channel(config):
            config.check_keys(("number",), required=("number",))
            async def send(item, ctx):
                SENT.append((config.options["number"], item.payload))
            return Channel(config.name, send, "Pages the on-call person.", ("text",))

        async def no_shouting(item, ctx):
            if item.payload.isupper():
                raise OutputBlocked("no shouting")
            return None

        def hooks():
            return OutputHook("no-shouting", before_output=no_shouting)
        """)
    )
    dist = root / "kernos_demo_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kernos-demo-plugin\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[kernos.channels]\npager = kernos_demo_plugin:pager_channel\n\n"
        "[kernos.output_hooks]\nno-shouting = kernos_demo_plugin:hooks\n"
    )
    monkeypatch.syspath_prepend(str(root))


async def test_a_third_party_plugin_registers_a_kind_and_a_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugin(tmp_path, monkeypatch)
    assert "pager" in channel_kinds()
    assert [h.name for h in load_hooks()] == ["no-shouting"]
    (tmp_path / "kernos.toml").write_text('[channels.oncall]\nkind = "pager"\nnumber = "555"\n')
    kernel = OutputKernel.from_config(load_config(cwd=tmp_path))
    receipt = await kernel.send("oncall", ["disk full", "HELP", "fixed"])
    assert receipt.text.splitlines()[2] == "[2] text failed: blocked by plugin: no shouting"
    plugin = sys.modules["kernos_demo_plugin"]
    assert plugin.SENT == [("555", "disk full"), ("555", "fixed")]
    monkeypatch.delitem(sys.modules, "kernos_demo_plugin")
