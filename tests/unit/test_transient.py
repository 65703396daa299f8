"""worker.backends.azure.queues.is_transient: which storage failures are worth the same call again later."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)

from worker.backends.azure.queues import is_transient


@dataclass
class FakeResponse:
    """What HttpResponseError reads from a response: status, reason, headers and a body."""

    status_code: int
    reason: str = "reason"
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/xml"

    def text(self, encoding: str | None = None) -> str:
        return ""

    def body(self) -> bytes:
        return b""


def with_response(cls: type[HttpResponseError], status: int, code: str | None = None) -> HttpResponseError:
    """An error as the SDK raises it: built from a response; the storage SDK then sets ``error_code``."""
    error = cls(message=f"HTTP {status}", response=FakeResponse(status))  # type: ignore[arg-type]
    if code is not None:
        error.error_code = code  # type: ignore[attr-defined]
    return error


def with_status(cls: type[HttpResponseError], status: int, code: str | None = None) -> HttpResponseError:
    """An error with no response, its status set afterwards."""
    error = cls(message=f"HTTP {status}")
    error.status_code = status
    if code is not None:
        error.error_code = code  # type: ignore[attr-defined]
    return error


Builder = Callable[..., HttpResponseError]
BUILDERS = [pytest.param(with_response, id="from-response"), pytest.param(with_status, id="status-set")]


def test_the_builders_give_the_status() -> None:
    assert with_response(HttpResponseError, 503).status_code == 503
    assert with_status(HttpResponseError, 503).status_code == 503


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize("status", [500, 502, 503, 504, 408, 429])
def test_server_errors_timeouts_and_throttling_are_transient(build: Builder, status: int) -> None:
    assert is_transient(build(HttpResponseError, status))


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize("status", [400, 401, 404, 403, 409, 412, 413])
def test_client_errors_are_not_transient(build: Builder, status: int) -> None:
    assert not is_transient(build(HttpResponseError, status))


@pytest.mark.parametrize("build", BUILDERS)
def test_not_found_and_exists_are_not_transient(build: Builder) -> None:
    assert not is_transient(build(ResourceNotFoundError, 404, "QueueNotFound"))
    assert not is_transient(build(ResourceNotFoundError, 404, "MessageNotFound"))
    assert not is_transient(build(ResourceExistsError, 409, "QueueAlreadyExists"))


@pytest.mark.parametrize("build", BUILDERS)
def test_queue_being_deleted_is_transient(build: Builder) -> None:
    """409 QueueBeingDeleted: the same create succeeds once the delete is done."""
    assert is_transient(build(ResourceExistsError, 409, "QueueBeingDeleted"))


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize("status", [401, 403])
def test_authentication_failure_is_not_transient(build: Builder, status: int) -> None:
    """ClientAuthenticationError is an HttpResponseError; a wrong key does not get better by retrying."""
    assert not is_transient(build(ClientAuthenticationError, status, "AuthenticationFailed"))


def test_authentication_failure_is_not_transient_even_with_a_transient_status() -> None:
    assert not is_transient(with_status(ClientAuthenticationError, 503))


@pytest.mark.parametrize("cls", [ServiceRequestError, ServiceResponseError])
def test_network_failures_are_transient(cls: type[Exception]) -> None:
    assert is_transient(cls("Cannot connect to host 127.0.0.1:1"))


@pytest.mark.parametrize("exc", [TimeoutError(), ConnectionRefusedError(), ConnectionResetError()])
def test_timeouts_and_connection_errors_are_transient(exc: Exception) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize("exc", [ValueError("bad"), RuntimeError("x"), KeyError("k")])
def test_other_exceptions_are_not_transient(exc: Exception) -> None:
    assert not is_transient(exc)
