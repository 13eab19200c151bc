"""Output channels: one ``output_send__<channel>`` tool per channel an agent may use.

One call sends one message (``payload`` a string: answered ``ok``) or several of several types
(``payload`` an array); a bad call sends nothing; a failing item never loses the items after it;
the receipt names each failed item and the channel's reason. See :mod:`kernos.output._kernel`.
"""

import typing

from kernos import _lazy

if typing.TYPE_CHECKING:
    from kernos.output._channel import (
        SEND_PREFIX,
        Channel,
        ChannelConfig,
        ChannelError,
        ChannelFactory,
        Delivery,
        InboundMessage,
        OutputContext,
        SendStatus,
    )
    from kernos.output._hooks import OutputHook
    from kernos.output._kernel import (
        OutputBlocked,
        OutputKernel,
        backfill_meta,
    )
    from kernos.output._parse import (
        DEFAULT_MAX_ITEMS,
        OutputArgumentError,
        OutputItem,
        parse_output_items,
    )
    from kernos.output._receipt import ItemOutcome, OutputReceipt
    from kernos.output._registry import (
        CHANNEL_GROUP,
        HOOK_GROUP,
        build_channel,
        build_channels,
        channel_kinds,
        load_hooks,
        read_channels,
    )
    from kernos.output._tools import (
        LIST_TOOL,
        OutputToolset,
        output_tools,
        send_schema,
    )

__all__ = [
    "CHANNEL_GROUP",
    "DEFAULT_MAX_ITEMS",
    "HOOK_GROUP",
    "LIST_TOOL",
    "SEND_PREFIX",
    "Channel",
    "ChannelConfig",
    "ChannelError",
    "ChannelFactory",
    "Delivery",
    "InboundMessage",
    "ItemOutcome",
    "OutputArgumentError",
    "OutputBlocked",
    "OutputContext",
    "OutputHook",
    "OutputItem",
    "OutputKernel",
    "OutputReceipt",
    "OutputToolset",
    "SendStatus",
    "backfill_meta",
    "build_channel",
    "build_channels",
    "channel_kinds",
    "load_hooks",
    "output_tools",
    "parse_output_items",
    "read_channels",
    "send_schema",
]


if not typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy.exports(__name__)
