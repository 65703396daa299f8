"""Azure Storage: :mod:`.connection` (connection strings as Functions reads them), :mod:`.queues` and
:mod:`.blobs` (the clients), :mod:`.errors` (how failures read) and :mod:`.deletes` (Delete Message, the hot
path's one call per message, built beside the SDK's generated layer and sent through its pipeline).
"""
