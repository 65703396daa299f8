"""OCI Queue on the official SDK: :mod:`.connection` (connection strings, limits; no SDK), :mod:`.auth`
(sign-in), :mod:`.errors` (how a failed call reads), :mod:`.calls` (whether a failed request sent anything),
:mod:`.admin` (queues and dead letters, the control plane) and :mod:`.queues` (the backend: messages).
"""
