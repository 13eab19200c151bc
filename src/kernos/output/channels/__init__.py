"""The built-in channel kinds. Each is a factory registered in the ``kernos.channels`` entry-point
group — the same way a third-party plugin registers its kinds."""

import typing

from kernos import _lazy

if typing.TYPE_CHECKING:
    from kernos.output.channels._apprise import apprise_channel
    from kernos.output.channels._console import console_channel
    from kernos.output.channels._email import email_channel
    from kernos.output.channels._file import file_channel
    from kernos.output.channels._onebot import onebot_channel
    from kernos.output.channels._webhook import webhook_channel

__all__ = [
    "apprise_channel",
    "console_channel",
    "email_channel",
    "file_channel",
    "onebot_channel",
    "webhook_channel",
]


if not typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy.exports(__name__)
