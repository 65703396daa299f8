"""Azure Storage: connection strings, the queue and blob clients, failures, and the hot path's calls.

:mod:`.connection` reads connection strings as Functions does. :mod:`.queues` and :mod:`.blobs` are the clients.
:mod:`.errors` says how failures read. :mod:`.messages` builds Get Messages and Delete Message beside the SDK.
"""
