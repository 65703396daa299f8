"""Azure Storage: :mod:`.connection` (connection strings as Functions reads them), :mod:`.queues` and
:mod:`.blobs` (the clients), :mod:`.errors` (how failures read) and :mod:`.messages` (Get Messages and Delete
Message, the hot path's calls, built and read beside the SDK's generated layer and sent through its pipeline).
"""
