"""How the Azure backends (queues and blobs) read a failed storage call: transient or not, and what to tell people.

One place serves both services, so failures read the same in the log, ``/readyz`` and the CLI.
A message names the cause, never a URL's query, which may carry a SAS token.
Both clients share one HTTP transport set-up, made here.
"""

from __future__ import annotations

import os

import aiohttp
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    IncompleteReadError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.pipeline.transport import AioHttpTransport

from worker.backends.failures import causes, describe_network_failure, first_line, network_cause, timed_out
from worker.dependencies import fall_back

#: Seconds to wait for an answer (a receive returns at once, even when empty).
READ_TIMEOUT = 30

_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: 409 QueueBeingDeleted: the queue is going away and may be created again shortly.
_TRANSIENT_CODES = frozenset({"QueueBeingDeleted", "ServerBusy", "InternalError", "OperationTimedOut"})


def error_code(exc: HttpResponseError) -> str:
    """Azure's error code (``PopReceiptMismatch``); the SDK gives an enum member or a plain string."""
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


def is_transient(exc: BaseException) -> bool:
    """True for failures the same call may get past later: the network, timeouts, 5xx, 408, 429, sign-in.

    A sign-in that fails for want of a token (no managed identity here yet,
    the token endpoint down) is transient too: the host keeps trying, as
    for an outage, and ``/readyz`` says why.
    """
    if isinstance(exc, ClientAuthenticationError):
        return exc.status_code is None  # the credential failed; a 401/403 from storage is an answer
    if isinstance(exc, (ServiceRequestError, ServiceResponseError, TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, IncompleteReadError):  # the answer was cut short: a reset by another name, no status
        return True
    if isinstance(exc, HttpResponseError):
        return exc.status_code in _TRANSIENT_STATUS or error_code(exc) in _TRANSIENT_CODES
    return False


def may_have_acted(exc: BaseException) -> bool:
    """Whether a failed call may have been carried out: its request may have reached storage (any answer did).

    Not where it provably did not: the sign-in failed before it, or aiohttp could not open the connection
    (refused, name not resolved, TLS handshake or certificate, connect timeout), which it reports before sending
    anything. azure-core's own ServiceRequestError ("no request was sent") is no proof: it also wraps a
    connection reset while the answer was awaited.
    """
    if isinstance(exc, ClientAuthenticationError) and exc.status_code is None:
        return False
    if isinstance(exc, HttpResponseError) and exc.status_code is not None:
        return True
    return not any(
        isinstance(cause, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)) for cause in causes(exc)
    )


def failure_kind(exc: BaseException) -> str:
    """A short name for a failure, for counters' labels: status and code, or the exception's type."""
    if isinstance(exc, HttpResponseError) and exc.status_code is not None:
        return f"HTTP {exc.status_code} {error_code(exc) or exc.reason or ''}".strip()
    return type(exc).__name__


def describe_failure(exc: BaseException) -> str:
    """What went wrong, for people: "connection refused", "name not resolved", "TLS: ...", "HTTP 403 AuthenticationFailed".

    Never the URL, whose query may carry a SAS token.
    """
    if isinstance(exc, HttpResponseError) and exc.status_code is not None:
        return f"HTTP {exc.status_code} {error_code(exc) or exc.reason or ''}".strip()
    if (cause := network_cause(exc)) is not None:
        return cause
    if isinstance(exc, ClientAuthenticationError):
        # DefaultAzureCredential lists every credential it tried; the managed identity's line is the one that matters.
        lines = [line.strip() for line in str(getattr(exc, "message", None) or exc).splitlines()]
        managed = next((line for line in lines if line.startswith("ManagedIdentityCredential:")), None)
        return f"sign-in failed: {first_line(exc)}" + (f" {managed[:300]}" if managed else "")
    if isinstance(exc, IncompleteReadError) and not timed_out(exc):
        return "the answer was cut short"
    return describe_network_failure(exc)


def env_settings_wanted() -> bool:
    """Whether the HTTP client should read proxy settings from the environment.

    With them on, aiohttp also looks for ~/.netrc on every request (in a thread),
    which costs a quarter of a no-op message's time; so they are on only where a
    proxy is configured, which is all they are for here (storage requests are signed).
    """
    return any(
        os.environ.get(name) for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
    )


#: A kept-alive connection idle for longer is closed rather than reused. Servers close idle connections on their
#: own clock (Azurite, as any Node.js server, after 5 s): a request written to a connection just as the server
#: closes it fails with "Server disconnected", which for a put is an unknown outcome rather than a retry. Reusing
#: only connections idle for less than the shortest such limit ends that race, at the price of a new connection
#: after a pause (a busy worker keeps its connections in use).
IDLE_CONNECTION_SECONDS = 4.0


class Transport(AioHttpTransport):
    """aiohttp's transport without aiohttp's own hidden retry, and without connections idle past
    :data:`IDLE_CONNECTION_SECONDS`.

    aiohttp sends an idempotent request (GET, PUT, DELETE) a second time,
    silently, when a kept-alive connection drops or resets under it. Our retry
    policy then never learns of the first failure: it is neither counted nor
    known to have possibly reached storage, so a DELETE whose first send went
    through comes back as MessageNotFound and reads as someone else's delete.
    Every retry is left to the backend, which knows.

    Both need private parts (azure-core's session state, aiohttp's retry
    switch): each is checked first, and where one is missing the transport
    goes on as azure-core's own, with one warning (:func:`worker.dependencies.fall_back`).
    """

    #: azure-core's, as its module declares it (the public import of the class is lazy, so mypy sees an untyped base).
    session: aiohttp.ClientSession | None
    #: The session :meth:`open` last made ready: only a new session needs the checks and settings below.
    _ready: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        if self.session is not None and self.session is self._ready:
            await super().open()
            return
        state = [getattr(self, name, None) for name in _TRANSPORT_STATE]
        if not all(isinstance(value, bool) for value in state):
            fall_back(
                "azure-core",
                "AioHttpTransport's " + ", ".join(_TRANSPORT_STATE),
                "its own HTTP session is used, which reuses connections however long idle (a put on one the "
                "server just closed fails as an unknown outcome)",
            )
        elif self.session is None and self._session_owner and not self._has_been_opened:
            # The session azure-core would make, with a connector that does not reuse long-idle connections.
            self.session = aiohttp.ClientSession(
                trust_env=self._use_env_settings,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                connector=aiohttp.TCPConnector(keepalive_timeout=IDLE_CONNECTION_SECONDS),
            )
        await super().open()
        if self.session is not None:
            if isinstance(getattr(self.session, _RETRY_SWITCH, None), bool):
                setattr(self.session, _RETRY_SWITCH, False)  # no public switch (aiohttp 3.x)
            else:
                fall_back(
                    "aiohttp",
                    f"ClientSession.{_RETRY_SWITCH}",
                    "its hidden second send of a request on a dropped connection may stay on, unseen by the "
                    "backend's retry policy",
                )
            self._ready = self.session


#: azure-core's AioHttpTransport state :meth:`Transport.open` reads to make the session azure-core would make.
_TRANSPORT_STATE = ("_session_owner", "_has_been_opened", "_use_env_settings")
#: aiohttp's switch of its hidden second send (:class:`Transport`).
_RETRY_SWITCH = "_retry_connection"
