"""Tracing: OpenTelemetry spans (private to :mod:`kernos.runtime`)."""
