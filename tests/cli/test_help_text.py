"""Every command's ``--help`` reads like git's or uv's: plain words, no type tags (``<bool>``),
arguments in capitals, no reStructuredText, defaults that are true."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kernos.cli import app


def _paths(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    if hasattr(command, "list_commands"):  # a group (typer's own click)
        ctx = command.context_class(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _paths(sub, (*path, name))


PATHS = list(_paths(typer.main.get_command(app)))


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "kernos")
def test_help_has_no_type_tags_braces_or_rst(path: tuple[str, ...]) -> None:
    done = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    shown = done.output
    assert not re.search(r"<(bool|str|int|float|path|list\[[a-z]+\]|[a-z]+)>", shown), shown
    assert not re.search(r"\{[a-z_]+\}", shown), shown  # arguments are PROMPT, not {prompt}
    assert "``" not in shown, shown
    assert "(default: ./kernos.toml)" not in shown, shown


def test_the_words_of_a_few_options_are_true() -> None:
    run = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
    assert "Usage: kernos run [OPTIONS] PROMPT" in run
    assert "are lost" not in run
    assert "--model" in run and "MODEL" in run  # an option that takes a value names it
    worker = CliRunner().invoke(app, ["worker", "--help"], env={"COLUMNS": "200"}).output
    assert "--models" in worker and "MODEL,MODEL" in worker
