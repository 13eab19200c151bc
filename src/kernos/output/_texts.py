"""Model-facing text, read from the files next to the code (``texts/`` and ``channels/``)."""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def text(name: str, package: str = "kernos.output.texts") -> str:
    """A text file's content, trailing whitespace removed."""
    return files(package).joinpath(name).read_text(encoding="utf-8").rstrip()


def channel_text(kind: str) -> tuple[str, str]:
    """A built-in kind's ``(description, meta format)``: the file's two parts around ``---``."""
    description, _, meta = text(f"{kind}.md", "kernos.output.channels").partition("\n---\n")
    return description.strip(), meta.strip()


def param_descriptions() -> dict[str, str]:
    """``send_params.txt``: one ``field: description`` line per parameter."""
    out: dict[str, str] = {}
    for line in text("send_params.txt").splitlines():
        key, _, description = line.partition(":")
        out[key.strip()] = description.strip()
    return out
