"""``read_channels`` (``kernos channels``): the channels of ``kernos.toml`` without the config
models, the same as ``build_channels(load_config())`` gives (the fast path keeps the
answer)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from kernos.output import Channel, build_channels, read_channels
from kernos.runtime import ConfigError, WorkspacePolicy, load_config

CHANNELS = """
[channels.log]
kind = "file"
description = "Audit log."
path = "out/log.jsonl"

[channels.term]
kind = "console"

[channels.hook]
kind = "webhook"
url = "http://127.0.0.1:9/hook/${HOOK_PATH}"
headers = { Authorization = "Bearer ${HOOK_TOKEN}" }
description = "  Team hook.  "

[channels.qq]
kind = "onebot"
base_url = "http://127.0.0.1:9"
recipients = ["user_id=42", 7]
"""


def shown(channels: dict[str, Channel]) -> list[tuple[Any, ...]]:
    """What listing and sending read of a channel (its handler is a new closure each build)."""
    return [
        (
            name,
            c.name,
            c.kind,
            c.types,
            c.description,
            c.meta_help,
            c.recipient_keys,
            c.recipients,
            c.default_recipients,
            c.secrets,
        )
        for name, c in channels.items()
    ]


def both(tmp_path: Path, text: str) -> tuple[Any, Any]:
    """(read_channels, build_channels(load_config)) of ``text``; an error is its message."""
    (tmp_path / "kernos.toml").write_text(textwrap.dedent(text), encoding="utf-8")
    answers: list[Any] = []
    for read in (
        lambda: read_channels(cwd=tmp_path),
        lambda: build_channels(load_config(cwd=tmp_path)),
    ):
        try:
            answers.append(shown(read()))
        except ConfigError as exc:
            answers.append(str(exc))
    return answers[0], answers[1]


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOOK_PATH", "p4th-s3cret")
    monkeypatch.setenv("HOOK_TOKEN", "t0ken-value")
    monkeypatch.delenv("KERNOS_TEST_UNSET", raising=False)
    monkeypatch.setenv("KERNOS_HOME", str(tmp_path / ".kernos"))


@pytest.mark.parametrize(
    "text",
    [
        CHANNELS,
        "",  # no channels
        "[channels]\n",
        'default_model = "openai-chat:x"\n[agents.bot]\nallowed_outputs = ["log"]\n' + CHANNELS,
        # mistakes: the same message either way
        '[channels.log]\nkind = "file"\npath = "${KERNOS_TEST_UNSET}"\n',
        '[channels.log]\nkind = "file"\npath = "x"\nmode = "a"\n',
        '[channels.log]\npath = "x"\n',
        '[channels."bad name"]\nkind = "console"\n',
        '[channels.term]\nkind = "console"\nrecipients = ["x"]\n',
        # not plain tables, or a workspace the channels get: read through the whole config
        "channels = 3\n",
        '[channels]\nlog = "x"\n',
        '[workspace]\nroots = ["."]\nallow_hidden = true\n' + CHANNELS,
        '[workspace]\nroots = ["nowhere"]\n' + CHANNELS,
    ],
)
def test_the_channels_are_those_of_the_whole_config(tmp_path: Path, text: str) -> None:
    light, whole = both(tmp_path, text)
    assert light == whole


def test_the_channels_of_a_config_named_by_path(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    file = tmp_path / "sub" / "other.toml"
    file.write_text(textwrap.dedent(CHANNELS), encoding="utf-8")
    assert shown(read_channels(file, cwd=tmp_path)) == shown(
        build_channels(load_config(file, cwd=tmp_path))
    )
    with pytest.raises(ConfigError, match="does not exist"):
        read_channels(tmp_path / "missing.toml", cwd=tmp_path)


def test_a_mistake_outside_the_channels_does_not_stop_the_listing(tmp_path: Path) -> None:
    # like `kernos tasks list`: what is listed is read; `kernos config check` reports the rest
    text = '[agents.bot]\nallowed_outputs = "log"\nflavour = 1\n' + CHANNELS
    light, whole = both(tmp_path, text)
    assert [row[0] for row in light] == ["log", "term", "hook", "qq"]
    assert "agents.bot" in whole


def test_the_workspace_without_a_table_is_the_whole_configs(tmp_path: Path) -> None:
    (tmp_path / "kernos.toml").write_text(textwrap.dedent(CHANNELS), encoding="utf-8")
    config = load_config(cwd=tmp_path)
    assert WorkspacePolicy.of_project(tmp_path, config.home, config.path) == (
        WorkspacePolicy.from_config(config)
    )


@pytest.mark.parametrize("build", ["read_channels", "build_channels"])
def test_the_installed_kinds_are_read_once_per_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build: str
) -> None:
    # each read scans every installed distribution (~10 ms): once for all four channels
    from kernos.output import _registry

    groups: list[str] = []
    real = _registry.entry_points

    def counted(*, group: str) -> Any:
        groups.append(group)
        return real(group=group)

    monkeypatch.setattr(_registry, "entry_points", counted)
    (tmp_path / "kernos.toml").write_text(textwrap.dedent(CHANNELS), encoding="utf-8")
    if build == "read_channels":
        channels = read_channels(cwd=tmp_path)
    else:
        channels = build_channels(load_config(cwd=tmp_path))
    assert len(channels) == 4
    assert groups == ["kernos.channels"]
