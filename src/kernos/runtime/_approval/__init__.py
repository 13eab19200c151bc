"""Approval: asking before a tool runs, and the approval requests in the store (private to
:mod:`kernos.runtime`)."""
