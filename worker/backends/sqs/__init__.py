"""Amazon SQS on botocore: connection strings, failures, FIFO ids, batches, the backend, queue URLs.

:mod:`.connection` holds connection strings, limits and capabilities, without the SDK.
:mod:`.errors` reads failed calls. :mod:`.fifo` gives FIFO puts their group and deduplication ids.
:mod:`.batches` sends deletes and visibility changes together.
:mod:`.queues` is the backend, on botocore in threads. :mod:`.urls` finds a queue's URL for a SAM ``!Ref``.
"""
