"""Amazon SQS on botocore: `connection` (connection strings, limits, capabilities; no SDK), `errors` (how a failed
call reads), `fifo` (group ids and deduplication ids of puts to FIFO queues) and `queues` (the backend).
"""
