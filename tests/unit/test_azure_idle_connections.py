"""Connections to Azure Storage left idle: never reused once the server may have closed them.

Azurite, like any Node.js server, closes a kept-alive connection after 5 s
without a request; real services and proxies have their own limits. A client
that picks such a connection just as the server closes it writes its request
into a closed socket and hears "Server disconnected": for a put, which may not
be sent twice (Put Message takes no retry token), that is an unknown outcome
handed to the caller, although nothing reached storage. The backend's HTTP
client therefore drops a connection idle for longer than
:data:`worker.backends.azure.errors.IDLE_CONNECTION_SECONDS`.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.azurite import Azurite
from worker.backends.azure.errors import IDLE_CONNECTION_SECONDS
from worker.backends.registry import open_backend

#: Longer than Azurite's keep-alive (Node.js's default of 5 s), so that it has closed the connection.
IDLE = 6.0


async def test_a_put_after_azurite_closed_the_idle_connection_goes_out_on_a_new_one(
    azurite: Azurite, tmp_path: Path
) -> None:
    assert IDLE_CONNECTION_SECONDS < 5.0 < IDLE
    backend = open_backend(azurite.connection_string, tmp_path)
    try:
        await backend.create_queue("idle")
        await backend.put("idle", "before")
        # Blocking on purpose: the event loop does not run, so the client cannot see the server's close before it
        # picks a connection for the next request, as when a busy loop comes back to an idle storage client.
        time.sleep(IDLE)
        # Reusing the kept-alive connection, this failed as OutcomeUnknown (Server disconnected).
        await backend.put("idle", "after")
        assert await backend.approximate_count("idle") == 2
    finally:
        await backend.close()
