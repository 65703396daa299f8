"""Each sign-in OCI documents for the Python SDK, chosen by ``auth=``, signing requests the test server verifies.

The server checks every request's signature: an API key's against its public half, a session token's (keyId
``ST$<token>``) against the key the token carries, once the token is known to be from its issuer.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.oci.fixture import OciTestServer
from worker.backends.queues import QueueError
from worker.backends.registry import open_backend


def connection(server: OciTestServer, query: str) -> str:
    return (f"oci+http://{server.endpoint.split('://', 1)[1]}?compartment={server.compartment_id}"
            f"&adminEndpoint={server.endpoint}&{query}")


async def test_a_session_profile_as_oci_session_authenticate_writes_it_signs_in_and_follows_a_refresh(
    oci_server: OciTestServer, tmp_path: Path
) -> None:
    """``auth=security_token`` signs with the session's key and token; when the token file is rewritten in place
    (``oci session refresh``) the next request carries the new token: a token from another issuer is refused at
    once, and a good one accepted again."""
    config = oci_server.session_profile(tmp_path)
    token_file = tmp_path / "sessions" / "SESSION" / "token"
    backend = open_backend(connection(oci_server, f"auth=security_token&config={config}&profile=SESSION"), tmp_path)
    queue = f"st-{uuid.uuid4().hex[:8]}"
    try:
        await backend.create_queue(queue)
        await backend.put(queue, "signed with a session")
        [got] = await backend.receive(queue, 1, 30)
        assert got.content == "signed with a session"

        oci_server.write_session_token(token_file, valid=False)
        with pytest.raises(QueueError, match="not issued by this server's token issuer"):
            await backend.approximate_count(queue)
        oci_server.write_session_token(token_file)
        assert await backend.approximate_count(queue) == 1
        await backend.delete_queue(queue)
    finally:
        await backend.close()


async def test_a_session_profile_read_as_an_api_key_says_which_sign_in_it_needs(
    oci_server: OciTestServer, tmp_path: Path
) -> None:
    config = oci_server.session_profile(tmp_path)
    backend = open_backend(connection(oci_server, f"config={config}&profile=SESSION"), tmp_path)
    try:
        with pytest.raises(QueueError, match="is a session .*sign in with auth=security_token"):
            await backend.approximate_count("any")
    finally:
        await backend.close()
