"""The embedded backend, for zero set-up: :mod:`.queues` (a SQLite queue file, message properties in a column
of their own), :mod:`.blobs` (a blob folder beside it) and :mod:`.files` (both owner-only whatever the umask, and
which existing ones others can read).
"""
