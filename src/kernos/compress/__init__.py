"""Audited semantic compression of prompt files.

A model rewrites a file into a dense register through two tools, ``rewrite`` and ``approve``,
declaring every deliberate loss; each draft is shown back in a separate review turn, and only an
approved draft is ever written. :func:`compress_files` is the entry point; :class:`CompressProtocol`
is the pure state machine underneath.
"""

import typing

from kernos import _lazy

if typing.TYPE_CHECKING:
    from kernos.compress._compact import COMPACT_AGENT, TranscriptCompactor
    from kernos.compress._loop import (
        FileReport,
        check_file_count,
        check_options,
        compress_files,
    )
    from kernos.compress._protocol import CompressError, CompressProtocol, Draft, Loss, Metrics
    from kernos.compress._report import format_report, header, json_report, tool_report
    from kernos.compress._session import Status, method_text
    from kernos.compress._targets import resolve_targets
    from kernos.compress._tokens import DEFAULT_MAX_TOKENS, Tokenizer, count_bytes, count_o200k
    from kernos.compress._tools import CompressToolset, compress_tools
    from kernos.compress._write import atomic_write

__all__ = [
    "COMPACT_AGENT",
    "DEFAULT_MAX_TOKENS",
    "CompressError",
    "CompressProtocol",
    "CompressToolset",
    "Draft",
    "FileReport",
    "Loss",
    "Metrics",
    "Status",
    "Tokenizer",
    "TranscriptCompactor",
    "atomic_write",
    "check_file_count",
    "check_options",
    "compress_files",
    "compress_tools",
    "count_bytes",
    "count_o200k",
    "format_report",
    "header",
    "json_report",
    "method_text",
    "resolve_targets",
    "tool_report",
]


if not typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy.exports(__name__)
