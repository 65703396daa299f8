"""Amazon SQS on botocore: :mod:`.connection` (connection strings, limits, capabilities; no SDK),
:mod:`.errors` (how a failed call reads), :mod:`.fifo` (group ids and deduplication ids of puts to FIFO queues),
:mod:`.batches` (deletes and visibility changes sent together), :mod:`.queues` (the backend on botocore in
threads, with redrive policies) and :mod:`.urls` (a queue's URL for a SAM template's ``!Ref``).
"""
