"""OCI Queue on the official SDK: connection strings, sign-in, failures, threads, the control plane, messages.

:mod:`.connection` holds connection strings and limits, without the SDK. :mod:`.auth` signs in.
:mod:`.errors` reads failed calls. :mod:`.calls` runs the blocking calls' threads and sockets.
:mod:`.admin` is the control plane (queues, dead letters). :mod:`.queues` is the backend: messages.
"""
