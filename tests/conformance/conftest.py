"""The conformance suite runs on every backend, OCI Queue (on its test server) included."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["sqlite", "azurite", "oci"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    return request.param
