"""The conformance suite runs on every backend, OCI Queue (on its test server) and Amazon SQS (on moto) included.

OCI Queue runs twice, once for each answer the test server may give a stale receipt (``Modes.stale_receipt``:
Oracle documents neither), so that the backend is held to the protocol whichever the service gives. Azure Storage
runs twice too: on the backend's fast path and on the SDK's public calls it falls back to.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.conftest import AZURITE_SDK, oci_connection

if TYPE_CHECKING:
    from tests.oci.fixture import OciTestServer

#: The OCI Queue test server whose stale receipts are answered 404 (the session's ``oci_server`` answers 400).
OCI_STALE_404 = "oci-stale-404"


@pytest.fixture(params=["sqlite", "azurite", AZURITE_SDK, "oci", pytest.param(OCI_STALE_404, marks=pytest.mark.oci), "sqs"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="session")
def oci_server_stale_404(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OciTestServer]:
    from tests.oci.fixture import OciTestServer
    from tests.oci.server import Modes

    server = OciTestServer(tmp_path_factory.mktemp("oci-404"), Modes(stale_receipt="404")).start()
    yield server
    server.stop()


@pytest.fixture
def connection(connection: str | None, backend_kind: str, request: pytest.FixtureRequest) -> str | None:
    """The suite's own server for the 404 answer; every other kind as ``tests/conftest.py`` resolves it."""
    if backend_kind == OCI_STALE_404:
        return oci_connection(request.getfixturevalue("oci_server_stale_404"))
    return connection
