"""kernos — a small agent kernel: trustworthy tool calls, sub-agent tasks, output channels and
audited prompt compression."""

__version__ = "0.1.0"
