"""Each sign-in OCI documents for the Python SDK, chosen by ``auth=``, signing requests the test server verifies.

The server checks every request's signature: an API key's against its public half, a session token's (keyId
``ST$<token>``) against the key the token carries, once the token is known to be from its issuer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.oci.fixture import OciTestServer
from tests.oci.stubs import ParentResource
from worker.backends.queues import QueueError
from worker.backends.registry import open_backend


def connection(server: OciTestServer, query: str) -> str:
    return (
        f"oci+http://{server.endpoint.split('://', 1)[1]}?compartment={server.compartment_id}"
        f"&adminEndpoint={server.endpoint}&{query}"
    )


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


#: Where a parent resource serves its resource principal token. The SDK puts the whole URL into a client's endpoint,
#: and since oci 2.189.0 (``BaseClient._validate_endpoint_host_components``) a client refuses an endpoint with a path:
#: "Invalid endpoint host: endpoint must not contain path, query, or fragment". So only a URL without a path signs in.
RPT_PATHS = [
    "/",
    pytest.param(
        "/resourcePrincipalToken/ocid1.parent.oc1.iad.test",
        marks=pytest.mark.xfail(
            strict=True, raises=QueueError, reason="the oci SDK refuses an RPT URL with a path (its endpoint check)"
        ),
    ),
]


@pytest.fixture
def parent_resource(oci_server: OciTestServer, request: pytest.FixtureRequest) -> Iterator[ParentResource]:
    """The parent's endpoints, serving the token at ``/`` unless the test names another path."""
    stub = ParentResource(oci_server, getattr(request, "param", "/"))
    yield stub
    stub.close()


def resource_principal_v3_env(
    oci_server: OciTestServer, parent: ParentResource, workdir: Path, *, leaf_valid: bool = True
) -> dict[str, str]:
    """The environment of a resource principal of version 3.0: a version 2.2 leaf resource (its session token and
    key in files), and its parent's token URL and session token endpoint, as ``get_resource_principals_signer()``
    reads them (``oci/auth/signers/resource_principals_signer.py``)."""
    leaf = oci_server.resource_principal_env(workdir, valid=leaf_valid)
    return {
        "OCI_RESOURCE_PRINCIPAL_VERSION": "3.0",
        "OCI_RESOURCE_PRINCIPAL_VERSION_FOR_LEAF_RESOURCE": "2.2",
        "OCI_RESOURCE_PRINCIPAL_RPST_FOR_LEAF_RESOURCE": leaf["OCI_RESOURCE_PRINCIPAL_RPST"],
        "OCI_RESOURCE_PRINCIPAL_PRIVATE_PEM_FOR_LEAF_RESOURCE": leaf["OCI_RESOURCE_PRINCIPAL_PRIVATE_PEM"],
        "OCI_RESOURCE_PRINCIPAL_REGION_FOR_LEAF_RESOURCE": leaf["OCI_RESOURCE_PRINCIPAL_REGION"],
        "OCI_RESOURCE_PRINCIPAL_RPT_URL_FOR_PARENT_RESOURCE": parent.rpt_url,
        "OCI_RESOURCE_PRINCIPAL_RPST_ENDPOINT_FOR_PARENT_RESOURCE": parent.stub.url,
    }


@pytest.mark.parametrize("parent_resource", RPT_PATHS, indirect=True)
async def test_a_resource_principal_of_version_3_signs_with_its_parents_session_token(
    oci_server: OciTestServer, parent_resource: ParentResource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``auth=resource_principal`` under ``OCI_RESOURCE_PRINCIPAL_VERSION=3.0``: the SDK signs its requests for the
    parent's token with the leaf's session token (the stub verifies them), then signs with the parent's session
    token, which the test server verifies; a parent token from another issuer is refused."""
    for name, value in resource_principal_v3_env(oci_server, parent_resource, tmp_path / "leaf").items():
        monkeypatch.setenv(name, value)
    backend = open_backend(connection(oci_server, "auth=resource_principal"), tmp_path)
    queue = f"rp3-{uuid.uuid4().hex[:8]}"
    admin = open_backend(connection(oci_server, f"config={oci_server.config_file}"), tmp_path)
    try:
        await admin.create_queue(queue)
        await backend.put(queue, "signed as the parent")
        [got] = await backend.receive(queue, 1, 30)
        assert got.content == "signed as the parent"
        assert [(r.method, r.target) for r in parent_resource.stub.requests] == [
            ("GET", parent_resource.rpt_path),
            ("POST", ParentResource.RPST_PATH),
        ]
        assert all(r.headers["authorization"].count('keyId="ST$') == 1 for r in parent_resource.stub.requests)
    finally:
        await backend.close()

    parent_resource.valid = False
    refused = open_backend(connection(oci_server, "auth=resource_principal"), tmp_path)
    try:
        with pytest.raises(QueueError, match="not issued by this server's token issuer"):
            await refused.approximate_count(queue)
    finally:
        await refused.close()
        await admin.delete_queue(queue)
        await admin.close()


async def test_a_resource_principal_of_version_3_whose_leaf_token_is_foreign_is_refused_by_the_parent(
    oci_server: OciTestServer, parent_resource: ParentResource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent's endpoints verify the leaf's signature as any OCI service would: a leaf token from another issuer
    ends the sign-in, named, before any request reaches the queue."""
    env = resource_principal_v3_env(oci_server, parent_resource, tmp_path / "leaf", leaf_valid=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    backend = open_backend(connection(oci_server, "auth=resource_principal"), tmp_path)
    try:
        with pytest.raises(
            QueueError,
            match="cannot sign in to OCI Queue as a resource principal: ServiceError: .*"
            "not issued by this server's token issuer",
        ):
            await backend.approximate_count("any")
    finally:
        await backend.close()
    # Only the token was asked for (the SDK asks again once after a 401, with the leaf's token read anew).
    assert {(r.method, r.target) for r in parent_resource.stub.requests} == {("GET", parent_resource.rpt_path)}
