"""Models: model strings resolved, the lean model interface and its adapters, the wire, the
wrappers (cassettes, text cleaning), model failures (private to :mod:`kernos.runtime`)."""
