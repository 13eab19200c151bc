"""The durable store: its connection and write buffer, its own migrations, the SQL dialects
(private to :mod:`kernos.runtime`)."""
