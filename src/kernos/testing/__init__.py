"""Test an agent against a real HTTP peer: a scripted, local OpenAI-compatible server.

:class:`FakeOpenAIServer` speaks Chat Completions on loopback, answers each request from a script
of :class:`Reply` objects built with :func:`text`, :func:`tool_call`, :func:`tool_calls` and
:func:`error` (an HTTP error answer), and records every request. It ships in the library, not
only in kernos' tests, so users test their own agents — in-process or as a ``kernos run``
subprocess — the way kernos tests itself.
"""

import typing

from kernos import _lazy

if typing.TYPE_CHECKING:
    from kernos.testing._replies import Reply, error, text, tool_call, tool_calls
    from kernos.testing._server import FakeOpenAIServer

__all__ = [
    "FakeOpenAIServer",
    "Reply",
    "error",
    "text",
    "tool_call",
    "tool_calls",
]


if not typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy.exports(__name__)
