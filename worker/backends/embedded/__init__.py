"""The embedded backend, for zero set-up: a SQLite queue file and a blob folder beside it.

:mod:`.queues` is the queue, with message properties in a column of their own.
:mod:`.blobs` is the blob folder. :mod:`.files` keeps both owner-only and reports looser ones.
"""
