"""The session: the loop and the port it meets the session through, the toolsets, compaction,
history, usage, the sessions table (private to :mod:`kernos.runtime`)."""
