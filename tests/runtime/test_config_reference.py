"""The ``kernos.toml`` reference: ``docs/config.md`` is what ``kernos config
reference`` prints from the config model, every key of the model is in it with a meaning and a
default, and a key without its ``#:`` comment stops the reference from being made."""

from __future__ import annotations

import json
import subprocess
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from kernos.runtime import Config
from kernos.runtime._config._reference import (
    MissingText,
    _keys,
    config_reference,
    render_reference,
)
from tests.conftest import KERNOS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "config.md"


def test_docs_config_md_is_the_generated_reference() -> None:
    assert DOCS.read_text(encoding="utf-8") == render_reference(config_reference()), (
        "docs/config.md is out of date: run `kernos config reference > docs/config.md`"
    )


def test_the_command_prints_the_committed_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [KERNOS, "config", "reference"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == DOCS.read_text(encoding="utf-8")
    as_json = subprocess.run(
        [KERNOS, "config", "reference", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    tables = json.loads(as_json.stdout)["tables"]
    assert [t["name"] for t in tables][:3] == ["", "models.NAME", "agents.NAME"]


def _model_keys(model: type[BaseModel], prefix: str) -> set[str]:
    """Every key a ``kernos.toml`` may hold under ``prefix``, walked from the model itself."""
    found: set[str] = set()
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        annotation = info.annotation
        value = typing.get_args(annotation)[1] if typing.get_origin(annotation) is dict else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found |= _model_keys(annotation, f"{prefix}{name}.")
        elif isinstance(value, type) and issubclass(value, BaseModel):
            found |= _model_keys(value, f"{prefix}{name}.NAME.")
        elif typing.get_origin(value) is dict:
            found.add(f"{prefix}{name}.NAME.kind")
        else:
            found.add(f"{prefix}{name}")
    return found


def test_every_key_of_the_config_model_is_documented() -> None:
    documented = {
        f"{t.name}.{k.name}" if t.name else k.name for t in config_reference() for k in t.keys
    }
    assert _model_keys(Config, "") == documented
    text = DOCS.read_text(encoding="utf-8")
    for table in config_reference():
        assert table.read_by and table.text
        for key in table.keys:
            assert key.text and key.default and f"| `{key.name}` |" in text


def test_a_key_without_its_comment_stops_the_reference() -> None:
    class Bare(BaseModel):
        documented: int = 1
        undocumented: int = 2

    with pytest.raises(MissingText, match=r"Bare\.documented has no #: comment"):
        _keys(Bare)
