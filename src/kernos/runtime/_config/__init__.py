"""Configuration: kernos.toml and the agent files, the kernos home, the workspace policy, the key
reference, model windows (private to :mod:`kernos.runtime`)."""
