"""Pure rules the config and the session share: budgets, compaction, permissions, approval states,
foreign tool text, repeated calls (private to :mod:`kernos.runtime`)."""
