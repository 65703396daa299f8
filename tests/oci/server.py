"""A test server for Oracle Cloud Infrastructure (OCI) Queue, REST API version 20210201.

Why it exists: OCI has no emulator for its Queue service, yet code that uses the service through the official
``oci`` SDK has to be tested against the protocol the SDK really speaks. This server answers the SDK's
``oci.queue.QueueClient`` (the data plane: messages) and the queue parts of ``oci.queue.QueueAdminClient`` (the
control plane: queues and work requests) on two loopback ports (each a cell of the data plane, see
``--other-cell``), keeps everything in memory, and checks every
request's signature the way the service does, so a client that signs wrongly fails here as it would in the cloud.

Run it as ``python -m tests.oci.server --port 0 --public-key PEM --tenancy T --user U --fingerprint F
[--token-issuer-key PEM] [--ready-file PATH] [--stale-receipt 400|404] [--retention-bound refuse|clamp]
[--put-answer send|close|reset] [--other-cell 404|serve]
[--hung-up-poll deliver|withhold] [--faults PATH]``; it prints ``OCI Queue test server listening on
http://127.0.0.1:PORT, messages endpoints URL URL`` when it is ready. ``tests/oci/fixture.py`` starts it for tests
with a fresh key, an SDK config file and a token issuer key of its own.

Who may call: the one API key given on the command line (keyId ``<tenancy>/<user>/<fingerprint>``), and, with
``--token-issuer-key``, any holder of a session token from that issuer (keyId ``ST$<token>``), which is how
resource principals (OCI Functions, OKE workload identity, Data Flow), instance principals and ``oci session``
sign. A session token is the JWT OCI's auth service issues, in the shape of the resource principal session token
(RPST) in Oracle's SDK tests (the Go and Java SDKs share one):

* header ``{"kid": ..., "alg": "RS256"}``; the signature is RS256 (RSA PKCS#1 v1.5, SHA-256) by the issuer's key;
* claims ``sub``, ``iss``, ``aud``, ``iat``, ``exp``, ``jti``, ``ptype`` (``resource``), ``ttype`` (``res``),
  ``res_id``, ``res_type``, ``res_tenant``, ``res_compartment``, ``tenant`` and ``jwk``: the public half of the key
  pair the caller made for its session, as a *string* holding a JSON Web Key
  (``"{\"kid\":...,\"n\":...,\"e\":\"AQAB\",\"kty\":\"RSA\",\"alg\":\"RS256\",\"use\":\"sig\"}"``),
  as OCI writes it.

The SDK reads only ``exp``, ``iat``, ``res_tenant`` and ``res_compartment`` from the token (it decodes it without
checking it) and signs each request with the session's private key, exactly as with an API key; the service's
side, and this server's, is to check the token's signature against the issuer, its ``exp`` against the clock, and
the request's signature against the key in ``jwk``. A token from another issuer, an expired one, one without an RSA
``jwk``, or a request signed with a key other than the token's is 401 NotAuthenticated. The other claims are not
checked: this server has no policies, so a valid token may do what the API key may.

Where the facts come from:

* Paths, query parameter names, JSON field names and headers: the SDK (``oci/queue/queue_client.py``,
  ``queue_admin_client.py`` and each model's ``attribute_map``), which Oracle generates from the API specification
  published at https://docs.oracle.com/iaas/api/#/en/queue/20210201/.
* Delivery semantics: https://docs.oracle.com/iaas/Content/queue/messages.htm ("Every time a message is delivered
  to a consumer, the message's Delivery Count field is incremented. When a message's delivery count reaches the
  configured maximum, it's sent to a dead letter queue"; a consumer whose message was redelivered "can no longer
  extend the message's visibility timeout or delete the message") and .../queue/deadletterqueues.htm (a dead
  letter message is kept until its retention period has passed).
* GetMessages: the SDK's parameter documentation (long polling until a message is visible or ``timeoutInSeconds``
  passes; 0 is a short poll; ``visibilityInSeconds`` 0 is a peek that still counts a delivery; ``channelFilter``
  matches a channel ID exactly; without it, "messages will be returned from a random non-empty channel within a
  queue": one channel's messages an answer, the channel picked at random among those with messages ready, and
  messages put without a channel count as one channel).
* Error statuses and codes: https://docs.oracle.com/iaas/Content/API/References/apierrors.htm.
* Signatures: https://docs.oracle.com/iaas/Content/API/Concepts/signingrequests.htm and the SDK's own signer
  (``oci/signer.py`` with ``oci/_vendor/httpsig_cffi``), whose signing string this server rebuilds.
* Session tokens: the SDK's signers (``oci/auth/signers/security_token_signer.py``: keyId ``ST$<token>``;
  ``ephemeral_resource_principals_signer.py`` and ``oci/auth/security_token_container.py``: the claims it reads) and
  the sample RPST in oracle/oci-go-sdk ``common/auth/resource_principal_key_provider_test.go`` (the claims OCI
  writes, ``jwk`` among them).

Limits and defaults (a request outside them is answered 400 InvalidParameter):

==============================================  ==========================  =========================================
what                                            range                       default
==============================================  ==========================  =========================================
GetMessages ``limit``                           1..20                       1
``visibilityInSeconds`` (queue and request)     0..43200 (12 hours)         the queue's; a queue's is 30
``timeoutInSeconds`` (queue and GetMessages)    0..30                       the queue's; a queue's is 30
``retentionInSeconds`` (queue; not updatable)   10..604800 (7 days)         86400 (assumed, see below)
``deadLetterQueueDeliveryCount``                0..20, 0 = no dead letters  0 (assumed)
``channelConsumptionLimit``                     1..100 (percent)            100
entries in PutMessages / UpdateMessages /       1..20
DeleteMessages
message ``content`` (UTF-8 bytes)               at most 256 KiB; 512 KiB with the LARGE_MESSAGES capability
all contents of one PutMessages request         at most 512 KiB
==============================================  ==========================  =========================================

The 7-day retention maximum is in Oracle's Queue FAQ; the other ranges are the API reference's as quoted by
SDK-generated tooling, and the size limits come from the same secondary sources, because the reference pages
themselves could not be read when this was written. Defaults marked "assumed" are not stated anywhere we could read.

Modes: where the reference is silent about an answer a client must handle, the server's answer is a named option
(:class:`Modes`, one command-line flag each), and its default is the answer harder on a client:

* ``--stale-receipt``: UpdateMessage(s) and DeleteMessage(s) with a well-formed receipt that no longer names the
  current delivery of a live message (the message was deleted, redelivered with a new receipt, or moved to the
  dead letter queue). ``400`` (the default): 400 InvalidParameter, with a message that does not say "receipt";
  ``404``: 404 NotAuthorizedOrNotFound, like any path resource that is gone. Oracle's API errors page
  (https://docs.oracle.com/iaas/Content/API/References/apierrors.htm) allows both: 400 InvalidParameter ("a
  parameter is invalid"), and 404 for a path component (the receipt is one) that is not found or not allowed.
* ``--retention-bound``: UpdateMessage(s) asking for a visibility that ends after the message's ``expireAfter``
  (its queue's ``retentionInSeconds`` from its creation). "The visibility timeout of a message can't extend
  beyond the message's retention" (https://docs.oracle.com/iaas/Content/queue/update-messages.htm) does not say
  whether such a request is refused or cut short. ``refuse`` (the default): 400 InvalidParameter, nothing changed;
  ``clamp``: the visibility ends at ``expireAfter``. GetMessages is not bounded so (its messages have different
  expiries); a message is gone at its ``expireAfter`` either way.
* ``--other-cell``: the data plane is served by two listeners (cells); each new queue goes to the next one in turn,
  and GetQueue and ListQueues give it as the queue's ``messagesEndpoint``. The SDK says only that "the messages
  endpoint may be different for different queues. Use GetQueue to find the queue's messagesEndpoint"
  (``oci/queue/queue_client.py``, ``get_messages``), not what another endpoint answers. ``404`` (the default): 404
  NotAuthorizedOrNotFound, as for a queue that does not exist; ``serve``: any listener serves any queue.
  SIGUSR1 moves every queue to the next cell, as a region may move a queue: a client that cached its endpoint
  then meets the other cell's answer.
* ``--put-answer``: not a choice of the reference but a fault a client meets: ``send`` (the default) answers
  PutMessages; ``close`` and ``reset`` store the messages and then close (FIN) or reset (RST) the connection
  instead of answering, as when an answer is lost on its way back, so that the client cannot know they were stored.
* ``--hung-up-poll``: a long poll (GetMessages with ``timeoutInSeconds``) whose client closed its connection before
  a message came. Oracle's documentation of long polling (https://docs.oracle.com/iaas/Content/queue/messages.htm,
  "Long polling") does not say the service notices; an HTTP server commonly learns of a hang-up only when it writes
  the answer. ``deliver`` (the default): the messages are delivered all the same (delivery count up, hidden for the
  request's visibility, receipts nobody reads); ``withhold``: the server sees the hang-up and delivers nothing.

Faults (``--faults PATH``): answers a client meets from a busy or changing service, played as a test scripts them.
PATH is a JSON list the server reads again whenever the file changes (write it whole, by rename); each entry is
``{"id", "operation", "status", "code", "times", "done", "retryAfter", "omit"}``: the next ``times`` requests
routed to ``operation`` (a :data:`ROUTES` name, e.g. ``put_messages``) are answered ``status``/``code`` with
``retry-after: retryAfter`` when given. ``done`` says whether the request is carried out first (the answer lost
after the work, as a 500 may be) or not at all (as a 429 or 503 says). An entry with ``omit`` instead answers
as usual without those fields of the JSON body, as a service may answer before it has them (a queue still being
made has no ``messagesEndpoint`` yet). ``tests/oci/fixture.py``'s ``fault`` and ``omit`` write the file.
Which statuses a client may take for "nothing done" is the backend's reading of the API errors page (see
``worker/backends/oci/errors.py``); a fault that did the work and then answers such a status is how a test shows
what that reading costs.

Other choices where the reference is silent (each is one place in the code):

* A receipt that is not one this server could have issued is 400 InvalidParameter.
* A message moves to the dead letter queue when it becomes visible again with ``deliveryCount`` at the queue's
  ``deadLetterQueueDeliveryCount``; dead letters show in GetStats (``dlq``) and go with PurgeQueue DLQ/BOTH. The API
  has no way to consume them ("manually consume" in the documentation is the Console's), so neither has this.
* Consumer groups are not implemented: a ``consumerGroupId`` names a resource that does not exist here.
* Control-plane operations finish at once: CreateQueue, UpdateQueue, DeleteQueue and PurgeQueue answer 202 with an
  ``opc-work-request-id`` whose work request has already SUCCEEDED.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import email.message
import email.utils
import hashlib
import json
import random
import re
import secrets
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import parse_qs, unquote, urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

API_VERSION = "20210201"
READY_LINE = "OCI Queue test server listening on {endpoint}, messages endpoints {cells}"

GET_LIMIT = (1, 20)
DEFAULT_GET_LIMIT = 1
BATCH_SIZE = (1, 20)
VISIBILITY = (0, 43200)
TIMEOUT = (0, 30)
RETENTION = (10, 604800)
DLQ_DELIVERY_COUNT = (0, 20)
CHANNEL_CONSUMPTION_LIMIT = (1, 100)
DEFAULT_VISIBILITY = 30
DEFAULT_TIMEOUT = 30
DEFAULT_RETENTION = 86400
DEFAULT_DLQ_DELIVERY_COUNT = 0
DEFAULT_CHANNEL_CONSUMPTION_LIMIT = 100
MAX_CONTENT_BYTES = 256 * 1024
MAX_LARGE_CONTENT_BYTES = 512 * 1024
MAX_PUT_BYTES = 512 * 1024
#: How far a request's ``date`` may be from the server's clock (the service allows 5 minutes).
MAX_CLOCK_SKEW = 300.0
#: The headers the SDK signs on every request, and in addition on requests with a body.
SIGNED_ALWAYS = ("date", "(request-target)", "host")
SIGNED_WITH_BODY = ("content-length", "content-type", "x-content-sha256")
#: A keyId that starts so carries a session token (``oci.auth.signers.security_token_signer``).
SESSION_TOKEN_PREFIX = "ST$"
CAPABILITIES = ("LARGE_MESSAGES",)
PURGE_TYPES = ("NORMAL", "DLQ", "BOTH")
LIFECYCLE_STATES = ("CREATING", "UPDATING", "ACTIVE", "DELETING", "DELETED", "FAILED", "INACTIVE")


class ApiError(Exception):
    """An error answer: the HTTP status and the ``{"code", "message"}`` body every OCI service sends."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


class Faults:
    """The scripted faults of ``--faults PATH`` (see the module's docstring): read again when the file changes,
    each entry spent after its ``times`` requests, counted by id across readings."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._entries: list[dict[str, Any]] = []
        self._used: dict[str, int] = {}

    def take(self, operation: str) -> dict[str, Any] | None:
        """The fault the next request to ``operation`` meets, if one is scripted and not yet spent."""
        if self._path is None:
            return None
        with self._lock:
            try:
                info = self._path.stat()
            except FileNotFoundError:
                return None
            if (info.st_ino, info.st_mtime_ns, info.st_size) != self._stamp:
                self._entries = json.loads(self._path.read_text() or "[]")
                self._stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
            for entry in self._entries:
                if entry["operation"] == operation and self._used.get(entry["id"], 0) < entry.get("times", 1):
                    self._used[entry["id"]] = self._used.get(entry["id"], 0) + 1
                    return entry
        return None


def fault_error(entry: dict[str, Any]) -> ApiError:
    """The answer a scripted fault gives."""
    headers = {"retry-after": str(entry["retryAfter"])} if entry.get("retryAfter") is not None else {}
    return ApiError(
        int(entry["status"]), str(entry["code"]), entry.get("message") or f"scripted fault {entry['id']}", headers
    )


STALE_RECEIPT_ANSWERS = ("400", "404")
RETENTION_BOUNDS = ("refuse", "clamp")
PUT_ANSWERS = ("send", "close", "reset")
OTHER_CELL_ANSWERS = ("404", "serve")
#: Listeners serving the data plane: queues are placed on them in turn, as a region spreads queues over cells.
CELLS = 2
HUNG_UP_POLLS = ("deliver", "withhold")


@dataclass(frozen=True)
class Modes:
    """The server's answers where the API reference is silent (see the module's docstring); defaults are the
    answers harder on a client."""

    stale_receipt: str = "400"
    retention_bound: str = "refuse"
    put_answer: str = "send"
    other_cell: str = "404"
    hung_up_poll: str = "deliver"


def invalid(message: str) -> ApiError:
    return ApiError(400, "InvalidParameter", message)


def missing(name: str) -> ApiError:
    return ApiError(400, "MissingParameter", f"{name} is required")


def not_found(what: str) -> ApiError:
    """The service does not tell "absent" from "not yours": both are 404 NotAuthorizedOrNotFound."""
    return ApiError(404, "NotAuthorizedOrNotFound", f"{what} was not found or you are not authorized to use it")


def not_authenticated(why: str) -> ApiError:
    return ApiError(
        401,
        "NotAuthenticated",
        f"The required information to complete authentication was not provided or was incorrect: {why}",
    )


def timestamp(epoch: float) -> str:
    """RFC 3339 in UTC with milliseconds, as the service writes times: ``2026-01-01T00:00:00.000Z``."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_ocid(kind: str) -> str:
    """An OCID of the service's shape (``ocid1.queue.oc1.iad.<unique>``): unique, lower case, opaque."""
    return f"ocid1.{kind}.oc1.iad.{base64.b32encode(secrets.token_bytes(30)).decode().lower()}"


def int_value(value: object, name: str, bounds: tuple[int, int], default: int | None = None) -> int:
    """An integer parameter from a query string or a JSON body, checked against its documented range."""
    if value is None:
        if default is None:
            raise missing(name)
        return default
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise invalid(f"{name} must be an integer, not {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"{name} must be an integer, not {value!r}")
    low, high = bounds
    if not low <= value <= high:
        raise invalid(f"{name} must be between {low} and {high}, not {value}")
    return value


def str_value(body: dict[str, Any], name: str, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise missing(name)
        return None
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string")
    return value


def json_object(body: Any, name: str = "the request body") -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "CannotParseRequest", f"{name} must be a JSON object")
    return body


def entries_of(body: Any, key: str) -> list[Any]:
    """The list a batch operation works on (``messages`` or ``entries``): 1 to 20 items."""
    items = json_object(body).get(key)
    if items is None:
        raise missing(key)
    if not isinstance(items, list):
        raise invalid(f"{key} must be a list")
    low, high = BATCH_SIZE
    if not low <= len(items) <= high:
        raise invalid(f"{key} must have {low} to {high} entries, not {len(items)}")
    return items


def reject_consumer_group(value: str | None, in_body: bool = False) -> None:
    """Consumer groups are not implemented, so any one a request names does not exist."""
    if value is not None:
        if in_body:
            raise ApiError(400, "RelatedResourceNotAuthorizedOrNotFound", f"consumer group {value} was not found")
        raise not_found(f"consumer group {value}")


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    """What an operation needs from an HTTP request: path parameters, query parameters and the JSON body."""

    path: dict[str, str]
    query: dict[str, str]
    body: Any
    #: Whether the client has hung up (``--hung-up-poll withhold`` then delivers nothing to it).
    gone: Callable[[], bool] = lambda: False
    #: The listener that took the request (``http://127.0.0.1:PORT``): a queue's messages are served at its own.
    endpoint: str = ""


@dataclass
class Message:
    id: int
    content: str
    size: int
    metadata: dict[str, Any] | None
    created_at: float
    expire_after: float
    visible_after: float
    delivery_count: int = 0
    #: The receipt of the latest delivery; every delivery issues a new one and earlier ones stop working.
    receipt: str | None = None

    @property
    def channel_id(self) -> str | None:
        return self.metadata["channelId"] if self.metadata else None

    def to_json(self) -> dict[str, Any]:
        """The ``GetMessage`` model."""
        out: dict[str, Any] = {
            "id": self.id,
            "content": self.content,
            "receipt": self.receipt,
            "deliveryCount": self.delivery_count,
            "visibleAfter": timestamp(self.visible_after),
            "expireAfter": timestamp(self.expire_after),
            "createdAt": timestamp(self.created_at),
        }
        if self.metadata is not None:
            out["metadata"] = self.metadata
        return out


@dataclass
class Queue:
    id: str
    display_name: str
    compartment_id: str
    time_created: float
    time_updated: float
    retention: int
    visibility: int
    timeout: int
    dlq_delivery_count: int
    channel_consumption_limit: int
    custom_encryption_key_id: str | None
    capabilities: list[str]
    freeform_tags: dict[str, str]
    defined_tags: dict[str, Any]
    #: The listener (cell) serving this queue's messages: its ``messagesEndpoint``.
    messages_endpoint: str
    lifecycle_state: str = "ACTIVE"
    #: Messages by id, in the order they were put (ids only grow), so deliveries are oldest first.
    messages: dict[int, Message] = field(default_factory=dict)
    dlq: dict[int, Message] = field(default_factory=dict)

    @property
    def max_content_bytes(self) -> int:
        return MAX_LARGE_CONTENT_BYTES if "LARGE_MESSAGES" in self.capabilities else MAX_CONTENT_BYTES

    def summary_json(self) -> dict[str, Any]:
        """The ``QueueSummary`` model (ListQueues)."""
        return {
            "id": self.id,
            "displayName": self.display_name,
            "compartmentId": self.compartment_id,
            "timeCreated": timestamp(self.time_created),
            "timeUpdated": timestamp(self.time_updated),
            "lifecycleState": self.lifecycle_state,
            "messagesEndpoint": self.messages_endpoint,
            "freeformTags": self.freeform_tags,
            "definedTags": self.defined_tags,
            "systemTags": {},
            "capabilities": self.capabilities,
        }

    def to_json(self) -> dict[str, Any]:
        """The ``Queue`` model (GetQueue)."""
        out = self.summary_json() | {
            "retentionInSeconds": self.retention,
            "visibilityInSeconds": self.visibility,
            "timeoutInSeconds": self.timeout,
            "deadLetterQueueDeliveryCount": self.dlq_delivery_count,
            "channelConsumptionLimit": self.channel_consumption_limit,
            "capabilities": [{"type": kind} for kind in self.capabilities],
        }
        if self.custom_encryption_key_id:
            out["customEncryptionKeyId"] = self.custom_encryption_key_id
        return out


@dataclass
class WorkRequest:
    id: str
    operation_type: str
    action_type: str
    queue: Queue
    time: float

    def to_json(self) -> dict[str, Any]:
        """The ``WorkRequest`` model: always finished, since every operation here completes at once."""
        return {
            "id": self.id,
            "operationType": self.operation_type,
            "status": "SUCCEEDED",
            "compartmentId": self.queue.compartment_id,
            "percentComplete": 100.0,
            "resources": [
                {
                    "entityType": "queue",
                    "actionType": self.action_type,
                    "identifier": self.queue.id,
                    "entityUri": f"/{API_VERSION}/queues/{self.queue.id}",
                }
            ],
            "timeAccepted": timestamp(self.time),
            "timeStarted": timestamp(self.time),
            "timeFinished": timestamp(self.time),
        }


def stats(messages: list[Message], now: float) -> dict[str, int]:
    """The ``Stats`` model: visible (deliverable now) and in-flight (delivered, not yet visible again) messages."""
    visible = sum(1 for message in messages if message.visible_after <= now)
    return {
        "visibleMessages": visible,
        "inFlightMessages": len(messages) - visible,
        "sizeInBytes": sum(message.size for message in messages),
    }


def one_channel(ready: list[Message]) -> list[Message]:
    """The messages of one channel, picked at random among those with messages ready: what an unfiltered
    GetMessages returns ("from a random non-empty channel within a queue", the SDK's ``get_messages``). Messages
    put without a channel are one channel of their own."""
    chosen = random.choice(sorted({message.channel_id or "" for message in ready}))
    return [message for message in ready if (message.channel_id or "") == chosen]


def page(items: list[Any], query: dict[str, str]) -> tuple[list[Any], dict[str, str]]:
    """List pagination: ``limit`` items from the offset in ``page``, and ``opc-next-page`` if more remain."""
    limit = int_value(query.get("limit"), "limit", (1, 1000), 1000)
    start = int_value(query.get("page"), "page", (0, len(items)), 0)
    end = start + limit
    return items[start:end], ({"opc-next-page": str(end)} if end < len(items) else {})


class QueueService:
    """All queues, messages and work requests, guarded by one condition variable.

    The condition is also what long polls wait on: every change that can make a message deliverable notifies it.
    Time-driven changes (visibility lapsing, retention expiring, moves to the dead letter queue) are applied lazily
    by :meth:`_sweep` whenever a queue is looked at, and a waiting poll wakes when the next message becomes visible.
    """

    def __init__(self, cells: list[str], modes: Modes) -> None:
        #: The data plane's listeners; a new queue goes to the next one in turn.
        self.cells = cells
        self.modes = modes
        self._lock = threading.Condition()
        self._queues: dict[str, Queue] = {}
        self._work_requests: dict[str, WorkRequest] = {}
        self._next_message_id = 1
        self._queues_created = 0

    # -- control plane ------------------------------------------------------------------------------------------

    def create_queue(self, request: Request) -> Reply:
        body = json_object(request.body)
        display_name = str_value(body, "displayName", required=True)
        compartment_id = str_value(body, "compartmentId", required=True)
        assert display_name is not None and compartment_id is not None
        now = time.time()
        queue = Queue(
            id=new_ocid("queue"),
            display_name=display_name,
            compartment_id=compartment_id,
            time_created=now,
            time_updated=now,
            retention=int_value(body.get("retentionInSeconds"), "retentionInSeconds", RETENTION, DEFAULT_RETENTION),
            visibility=int_value(body.get("visibilityInSeconds"), "visibilityInSeconds", VISIBILITY, DEFAULT_VISIBILITY),
            timeout=int_value(body.get("timeoutInSeconds"), "timeoutInSeconds", TIMEOUT, DEFAULT_TIMEOUT),
            dlq_delivery_count=int_value(
                body.get("deadLetterQueueDeliveryCount"),
                "deadLetterQueueDeliveryCount",
                DLQ_DELIVERY_COUNT,
                DEFAULT_DLQ_DELIVERY_COUNT,
            ),
            channel_consumption_limit=int_value(
                body.get("channelConsumptionLimit"),
                "channelConsumptionLimit",
                CHANNEL_CONSUMPTION_LIMIT,
                DEFAULT_CHANNEL_CONSUMPTION_LIMIT,
            ),
            custom_encryption_key_id=str_value(body, "customEncryptionKeyId"),
            capabilities=self._capabilities(body.get("capabilities")),
            freeform_tags=self._tags(body, "freeformTags"),
            defined_tags=self._tags(body, "definedTags"),
            messages_endpoint="",
        )
        with self._lock:
            queue.messages_endpoint = self.cells[self._queues_created % len(self.cells)]
            self._queues_created += 1
            self._queues[queue.id] = queue
            return self._accepted("CREATE_QUEUE", "CREATED", queue)

    def get_queue(self, request: Request) -> Reply:
        with self._lock:
            return Reply(200, self._queue(request.path["queueId"]).to_json())

    def list_queues(self, request: Request) -> Reply:
        query = request.query
        state = query.get("lifecycleState")
        if state is not None and state not in LIFECYCLE_STATES:
            raise invalid(f"lifecycleState must be one of {', '.join(LIFECYCLE_STATES)}")
        sort_by = query.get("sortBy", "timeCreated")
        if sort_by not in ("timeCreated", "displayName"):
            raise invalid("sortBy must be timeCreated or displayName")
        # As documented: timeCreated sorts newest first unless told otherwise, displayName A to Z.
        order = query.get("sortOrder", "DESC" if sort_by == "timeCreated" else "ASC")
        if order not in ("ASC", "DESC"):
            raise invalid("sortOrder must be ASC or DESC")
        filters = {
            "compartmentId": "compartment_id",
            "displayName": "display_name",
            "lifecycleState": "lifecycle_state",
            "id": "id",
        }
        with self._lock:
            queues = [
                queue
                for queue in self._queues.values()
                if all(query[name] == getattr(queue, attr) for name, attr in filters.items() if name in query)
            ]
            queues.sort(
                key=lambda q: q.time_created if sort_by == "timeCreated" else q.display_name, reverse=order == "DESC"
            )
            items, headers = page(queues, query)
            return Reply(200, {"items": [queue.summary_json() for queue in items]}, headers)

    def update_queue(self, request: Request) -> Reply:
        body = json_object(request.body)
        changes: dict[str, Any] = {}
        if "displayName" in body:
            changes["display_name"] = str_value(body, "displayName", required=True)
        for name, attr, bounds in (
            ("visibilityInSeconds", "visibility", VISIBILITY),
            ("timeoutInSeconds", "timeout", TIMEOUT),
            ("deadLetterQueueDeliveryCount", "dlq_delivery_count", DLQ_DELIVERY_COUNT),
            ("channelConsumptionLimit", "channel_consumption_limit", CHANNEL_CONSUMPTION_LIMIT),
        ):
            if body.get(name) is not None:
                changes[attr] = int_value(body[name], name, bounds)
        if "customEncryptionKeyId" in body:  # documented: an empty string removes the key
            changes["custom_encryption_key_id"] = str_value(body, "customEncryptionKeyId") or None
        if body.get("capabilities") is not None:
            changes["capabilities"] = self._capabilities(body["capabilities"])
        for name, attr in (("freeformTags", "freeform_tags"), ("definedTags", "defined_tags")):
            if body.get(name) is not None:
                changes[attr] = self._tags(body, name)
        with self._lock:
            queue = self._active(request.path["queueId"])
            for attr, value in changes.items():
                setattr(queue, attr, value)
            queue.time_updated = time.time()
            self._lock.notify_all()  # a changed timeout or delivery count matters to waiting polls
            return self._accepted("UPDATE_QUEUE", "UPDATED", queue)

    def delete_queue(self, request: Request) -> Reply:
        with self._lock:
            queue = self._active(request.path["queueId"])
            queue.lifecycle_state = "DELETED"
            queue.time_updated = time.time()
            queue.messages.clear()
            queue.dlq.clear()
            self._lock.notify_all()  # polls on the queue end with 404
            return self._accepted("DELETE_QUEUE", "DELETED", queue)

    def purge_queue(self, request: Request) -> Reply:
        body = json_object(request.body)
        purge_type = str_value(body, "purgeType", required=True)
        if purge_type not in PURGE_TYPES:
            raise invalid(f"purgeType must be one of {', '.join(PURGE_TYPES)}")
        reject_consumer_group(str_value(body, "consumerGroupId"), in_body=True)
        channels = body.get("channelIds")
        if channels is not None and not (isinstance(channels, list) and all(isinstance(c, str) for c in channels)):
            raise invalid("channelIds must be a list of strings")
        with self._lock:
            queue = self._active(request.path["queueId"])
            stores = {"NORMAL": [queue.messages], "DLQ": [queue.dlq], "BOTH": [queue.messages, queue.dlq]}[purge_type]
            for store in stores:
                for message in [m for m in store.values() if channels is None or m.channel_id in channels]:
                    del store[message.id]
            return self._accepted("PURGE_QUEUE", "UPDATED", queue)

    def get_work_request(self, request: Request) -> Reply:
        with self._lock:
            work_request = self._work_requests.get(request.path["workRequestId"])
            if work_request is None:
                raise not_found(f"work request {request.path['workRequestId']}")
            return Reply(200, work_request.to_json())

    def move_queues(self) -> None:
        """Move every queue to the next cell (SIGUSR1): a client's cached messages endpoint is then another cell's."""
        with self._lock:
            for queue in self._queues.values():
                queue.messages_endpoint = self.cells[(self.cells.index(queue.messages_endpoint) + 1) % len(self.cells)]
            self._lock.notify_all()  # long polls at the old cell end with 404 (``--other-cell 404``)

    # -- data plane ---------------------------------------------------------------------------------------------

    def get_messages(self, request: Request) -> Reply:
        query = request.query
        reject_consumer_group(query.get("consumerGroupId"))
        channel = query.get("channelFilter")
        with self._lock:
            queue = self._served(request)
            visibility = int_value(query.get("visibilityInSeconds"), "visibilityInSeconds", VISIBILITY, queue.visibility)
            timeout = int_value(query.get("timeoutInSeconds"), "timeoutInSeconds", TIMEOUT, queue.timeout)
            limit = int_value(query.get("limit"), "limit", GET_LIMIT, DEFAULT_GET_LIMIT)
            deadline = time.monotonic() + timeout
            while True:
                now = time.time()
                self._sweep(queue, now)
                ready = [
                    m
                    for m in queue.messages.values()
                    if m.visible_after <= now and (channel is None or m.channel_id == channel)
                ]
                left = deadline - time.monotonic()
                if request.gone() and self.modes.hung_up_poll == "withhold":  # nobody would read the answer
                    ready = []
                    break
                if ready or left <= 0:
                    break
                # Long poll: a put or an update notifies; a visibility that lapses does not, so wake for it.
                lapses = [m.visible_after - now for m in queue.messages.values() if m.visible_after > now]
                self._lock.wait(min([left, *lapses]))
                queue = self._served(request)  # deleted while we waited: 404
            if channel is None and ready:
                ready = one_channel(ready)
            delivered = []
            for message in ready[:limit]:
                message.delivery_count += 1
                message.visible_after = now + visibility
                message.receipt = self._new_receipt(message)
                delivered.append(message.to_json())
            return Reply(200, {"messages": delivered})

    def put_messages(self, request: Request) -> Reply:
        entries = entries_of(request.body, "messages")
        with self._lock:
            queue = self._served(request)
            checked = [self._checked_entry(entry, f"messages[{i}]", queue) for i, entry in enumerate(entries)]
            total = sum(size for _, size, _ in checked)
            if total > MAX_PUT_BYTES:
                raise invalid(f"the messages of one request may have at most {MAX_PUT_BYTES} bytes of content, not {total}")
            now = time.time()
            put = []
            for content, size, metadata in checked:
                message = Message(
                    id=self._next_message_id,
                    content=content,
                    size=size,
                    metadata=metadata,
                    created_at=now,
                    expire_after=now + queue.retention,
                    visible_after=now,
                )
                self._next_message_id += 1
                queue.messages[message.id] = message
                put.append({"id": message.id, "expireAfter": timestamp(message.expire_after)})
            self._lock.notify_all()
            return Reply(200, {"messages": put})

    def update_message(self, request: Request) -> Reply:
        reject_consumer_group(request.query.get("consumerGroupId"))
        body = json_object(request.body)
        with self._lock:
            queue = self._served(request)
            return Reply(200, self._update(queue, request.path["messageReceipt"], body.get("visibilityInSeconds")))

    def update_messages(self, request: Request) -> Reply:
        reject_consumer_group(request.query.get("consumerGroupId"))
        entries = entries_of(request.body, "entries")
        with self._lock:
            queue = self._served(request)
            return Reply(
                200,
                self._batch(
                    entries, lambda entry: self._update(queue, entry.get("receipt"), entry.get("visibilityInSeconds"))
                ),
            )

    def delete_message(self, request: Request) -> Reply:
        reject_consumer_group(request.query.get("consumerGroupId"))
        with self._lock:
            queue = self._served(request)
            self._delete(queue, request.path["messageReceipt"])
            return Reply(204)

    def delete_messages(self, request: Request) -> Reply:
        reject_consumer_group(request.query.get("consumerGroupId"))
        entries = entries_of(request.body, "entries")
        with self._lock:
            queue = self._served(request)
            return Reply(200, self._batch(entries, lambda entry: self._delete(queue, entry.get("receipt"))))

    def get_stats(self, request: Request) -> Reply:
        reject_consumer_group(request.query.get("consumerGroupId"))
        channel = request.query.get("channelId")
        with self._lock:
            queue = self._served(request)
            now = time.time()
            self._sweep(queue, now)

            def of(store: dict[int, Message]) -> list[Message]:
                return [m for m in store.values() if channel is None or m.channel_id == channel]

            body: dict[str, Any] = {"queue": stats(of(queue.messages), now), "dlq": stats(of(queue.dlq), now)}
            if channel is not None:
                body["channelId"] = channel
            return Reply(200, body)

    def list_channels(self, request: Request) -> Reply:
        """The documented "approximate list of IDs of non-empty channels"."""
        reject_consumer_group(request.query.get("consumerGroupId"))
        wanted = request.query.get("channelFilter")
        with self._lock:
            queue = self._served(request)
            self._sweep(queue, time.time())
            channels = sorted({m.channel_id for m in queue.messages.values() if m.channel_id is not None})
            channels = [c for c in channels if wanted is None or c == wanted]
            items, headers = page(channels, request.query)
            return Reply(200, {"items": items}, headers)

    # -- helpers (called with the lock held where they touch state) ---------------------------------------------

    def _queue(self, queue_id: str) -> Queue:
        queue = self._queues.get(queue_id)
        if queue is None:
            raise not_found(f"queue {queue_id}")
        return queue

    def _served(self, request: Request) -> Queue:
        """The active queue of a data-plane request; 404 at another cell's listener (``--other-cell 404``).

        The SDK says a queue's messages endpoint "may be different for different queues" (``get_messages``); what
        another endpoint answers is not documented, so the default is that it does not know the queue."""
        queue = self._active(request.path["queueId"])
        if self.modes.other_cell == "404" and request.endpoint != queue.messages_endpoint:
            raise not_found(f"queue {queue.id}")
        return queue

    def _active(self, queue_id: str) -> Queue:
        """A queue that takes requests. A deleted one still shows in GetQueue and ListQueues, but is gone for the rest."""
        queue = self._queue(queue_id)
        if queue.lifecycle_state != "ACTIVE":
            raise not_found(f"queue {queue_id}")
        return queue

    def _accepted(self, operation: str, action: str, queue: Queue) -> Reply:
        work_request = WorkRequest(new_ocid("queueworkrequest"), operation, action, queue, time.time())
        self._work_requests[work_request.id] = work_request
        return Reply(202, None, {"opc-work-request-id": work_request.id})

    def _sweep(self, queue: Queue, now: float) -> None:
        """Apply what time did: drop messages past retention, move spent messages that are visible again to the DLQ."""
        for store in (queue.messages, queue.dlq):
            for message in [m for m in store.values() if m.expire_after <= now]:
                del store[message.id]
        if queue.dlq_delivery_count > 0:
            for message in [
                m for m in queue.messages.values() if m.visible_after <= now and m.delivery_count >= queue.dlq_delivery_count
            ]:
                del queue.messages[message.id]
                message.receipt = None
                queue.dlq[message.id] = message

    def _new_receipt(self, message: Message) -> str:
        """Opaque to clients (base64url, as documented); inside, the message id and the delivery it is for."""
        raw = f"{message.id}.{message.delivery_count}.{secrets.token_hex(12)}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _message_for(self, queue: Queue, receipt: object) -> Message:
        if receipt is None:
            raise missing("receipt")
        if not isinstance(receipt, str):
            raise invalid("a receipt must be a string")
        try:
            raw = base64.urlsafe_b64decode(receipt + "=" * (-len(receipt) % 4))
            if base64.urlsafe_b64encode(raw).decode().rstrip("=") != receipt:
                raise ValueError("not canonical base64url")
            message_id, _, _ = raw.decode("ascii").split(".")
            number = int(message_id)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise invalid(f"{receipt!r} is not a message receipt") from None
        message = queue.messages.get(number)
        if message is None or message.receipt is None or not secrets.compare_digest(message.receipt, receipt):
            if self.modes.stale_receipt == "400":
                raise invalid("a parameter of the request is not valid")  # said without naming the receipt
            raise not_found("the message of this receipt (deleted, redelivered with a new receipt, or dead-lettered)")
        return message

    def _update(self, queue: Queue, receipt: object, visibility: object) -> dict[str, Any]:
        """UpdateMessage: hide the message for ``visibility`` seconds from now (0 makes it visible at once)."""
        seconds = int_value(visibility, "visibilityInSeconds", VISIBILITY)
        message = self._message_for(queue, receipt)
        now = time.time()
        if now + seconds > message.expire_after:
            if self.modes.retention_bound == "refuse":
                raise invalid(
                    f"visibilityInSeconds {seconds} goes past the message's retention: it expires in "
                    f"{message.expire_after - now:.3f} s"
                )
            message.visible_after = message.expire_after  # clamp: visible (and so gone) at its expiry
        else:
            message.visible_after = now + seconds
        self._lock.notify_all()
        return {"id": message.id, "visibleAfter": timestamp(message.visible_after)}

    def _delete(self, queue: Queue, receipt: object) -> dict[str, Any]:
        message = self._message_for(queue, receipt)
        del queue.messages[message.id]
        return {}

    def _batch(self, entries: list[Any], action: Any) -> dict[str, Any]:
        """Run one action per entry; a failed entry carries its status as ``errorCode`` and does not stop the rest."""
        results: list[dict[str, Any]] = []
        client_failures = server_failures = 0
        for entry in entries:
            try:
                results.append(action(json_object(entry, "an entry")))
            except ApiError as error:
                results.append({"errorCode": error.status, "errorMessage": error.message})
                if error.status < 500:
                    client_failures += 1
                else:
                    server_failures += 1
        return {"clientFailures": client_failures, "serverFailures": server_failures, "entries": results}

    def _checked_entry(self, entry: Any, name: str, queue: Queue) -> tuple[str, int, dict[str, Any] | None]:
        """One PutMessages entry as (content, its size in UTF-8 bytes, metadata), or 400."""
        entry = json_object(entry, name)
        content = str_value(entry, "content", required=True)
        assert content is not None
        size = len(content.encode())
        if size > queue.max_content_bytes:
            raise invalid(
                f"{name}.content has {size} bytes; a message of this queue may have at most {queue.max_content_bytes}"
            )
        metadata = entry.get("metadata")
        if metadata is None:
            return content, size, None
        metadata = json_object(metadata, f"{name}.metadata")
        channel = str_value(metadata, "channelId", required=True)
        properties = metadata.get("customProperties")
        if properties is not None and not (
            isinstance(properties, dict) and all(isinstance(v, str) for v in properties.values())
        ):
            raise invalid(f"{name}.metadata.customProperties must map strings to strings")
        return content, size, {"channelId": channel, **({"customProperties": properties} if properties else {})}

    @staticmethod
    def _capabilities(value: Any) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise invalid("capabilities must be a list")
        kinds = [json_object(item, "a capability").get("type") for item in value]
        for kind in kinds:
            if kind not in CAPABILITIES:
                raise invalid(f"capability {kind!r} is not supported by this test server ({', '.join(CAPABILITIES)})")
        return list(dict.fromkeys(kinds))

    @staticmethod
    def _tags(body: dict[str, Any], name: str) -> dict[str, Any]:
        value = body.get(name) or {}
        if not isinstance(value, dict):
            raise invalid(f"{name} must be an object")
        return value


class SignatureVerifier:
    """Checks a request's OCI signature: the HTTP Signatures draft, as ``oci.signer.Signer`` produces it.

    The SDK sends ``Authorization: Signature version="1",keyId="<tenancy>/<user>/<fingerprint>",
    algorithm="rsa-sha256",headers="date (request-target) host[ content-length content-type x-content-sha256]",
    signature="<base64>"``; the signature is RSA PKCS#1 v1.5 with SHA-256 over the lines ``name: value`` of the
    listed headers, where ``(request-target)`` is the lower-case method, a space and the path with its query.
    With a session token the keyId is ``ST$<token>`` and the key is the one in the token (see the module's
    docstring). Any failure is 401 NotAuthenticated, as the service answers.
    """

    def __init__(
        self,
        key_id: str | None,
        public_key: rsa.RSAPublicKey | None,
        token_issuer: rsa.RSAPublicKey | None = None,
        always: tuple[str, ...] = SIGNED_ALWAYS,
    ) -> None:
        #: The one key that is not a session token's (None: session tokens only, as the auth service's stubs take).
        self.key_id = key_id
        self.public_key = public_key
        #: The public key whose session tokens are accepted; None accepts none.
        self.token_issuer = token_issuer
        #: The headers every request must sign: the SDK's clients sign ``host`` too, its X.509 federation client not.
        self.always = always

    def verify(self, method: str, target: str, headers: email.message.Message, body: bytes) -> None:
        """Raise 401 NotAuthenticated unless the request is signed by a known key, over every header it must sign."""
        params = self._signature_params(headers.get("authorization"))
        public_key, whose = self._public_key(params.get("keyId") or "")
        if params.get("algorithm") != "rsa-sha256":
            raise not_authenticated(f"algorithm {params.get('algorithm')!r} is not rsa-sha256")
        signed = params.get("headers", "date").lower().split()
        has_body = method in ("POST", "PUT", "PATCH")
        unsigned = [name for name in (*self.always, *(SIGNED_WITH_BODY if has_body else ())) if name not in signed]
        if unsigned:
            raise not_authenticated(f"the signature does not cover {', '.join(unsigned)}")
        self._check_date(headers.get("date"))
        if has_body:
            self._check_body(headers, body)
        text = self._signing_string(method, target, headers, signed)
        try:
            signature = base64.b64decode(params.get("signature", ""), validate=True)
            public_key.verify(signature, text.encode("latin-1"), padding.PKCS1v15(), hashes.SHA256())
        except (binascii.Error, InvalidSignature, UnicodeEncodeError):
            raise not_authenticated(f"the signature does not verify with {whose}") from None

    @staticmethod
    def _signature_params(authorization: str | None) -> dict[str, str]:
        """The parameters of an ``Authorization: Signature ...`` header of version 1."""
        if not authorization:
            raise not_authenticated("the request has no Authorization header")
        scheme, _, rest = authorization.partition(" ")
        if scheme != "Signature":
            raise not_authenticated("the Authorization header is not an OCI request signature")
        params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if params.get("version", "1") != "1":
            raise not_authenticated(f"signature version {params['version']} is not 1")
        return params

    def _public_key(self, key_id: str) -> tuple[rsa.RSAPublicKey, str]:
        """The key ``key_id`` names (the API key, or a session token's), and how a failure names it."""
        if key_id.startswith(SESSION_TOKEN_PREFIX):
            return self.session_key(key_id[len(SESSION_TOKEN_PREFIX) :]), "the key of the session token"
        if key_id == self.key_id and self.public_key is not None:
            return self.public_key, "the API key"
        raise not_authenticated(f"keyId {key_id[:200]!r} is not a known API key")

    @staticmethod
    def _check_body(headers: email.message.Message, body: bytes) -> None:
        """The signed digest and length of a request with a body must be the body's."""
        digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
        if headers.get("x-content-sha256") != digest:
            raise not_authenticated("x-content-sha256 is not the SHA-256 of the body")
        if headers.get("content-length") != str(len(body)):
            raise not_authenticated("content-length is not the length of the body")

    @staticmethod
    def _signing_string(method: str, target: str, headers: email.message.Message, signed: list[str]) -> str:
        """The text the signature covers: a line ``name: value`` for each signed header, in the order signed."""
        lines = []
        for name in signed:
            value = f"{method.lower()} {target}" if name == "(request-target)" else headers.get(name)
            if value is None:
                raise not_authenticated(f"the signed header {name} is missing")
            lines.append(f"{name}: {value}")
        return "\n".join(lines)

    def session_key(self, token: str) -> rsa.RSAPublicKey:
        """The public key a session token carries, once the token is known to be this issuer's and unexpired."""
        if self.token_issuer is None:
            raise not_authenticated("this server accepts no session tokens")
        try:
            header_part, claims_part, signature_part = token.split(".")
            header, claims = (json.loads(_base64url(header_part)), json.loads(_base64url(claims_part)))
            signature = _base64url(signature_part)
        except ValueError:  # also binascii.Error, UnicodeDecodeError and json.JSONDecodeError
            raise not_authenticated("the session token is not a JWT") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise not_authenticated("the session token is not a JWT")
        if header.get("alg") != "RS256":
            raise not_authenticated(f"the session token's algorithm {header.get('alg')!r} is not RS256")
        try:
            self.token_issuer.verify(
                signature, f"{header_part}.{claims_part}".encode("ascii"), padding.PKCS1v15(), hashes.SHA256()
            )
        except InvalidSignature:
            raise not_authenticated("the session token was not issued by this server's token issuer") from None
        expires = claims.get("exp")
        if isinstance(expires, bool) or not isinstance(expires, int | float):
            raise not_authenticated("the session token has no expiry (exp)")
        if expires <= time.time():
            raise not_authenticated(f"the session token expired {time.time() - expires:.0f} s ago")
        try:
            jwk = json.loads(claims["jwk"])
            if jwk["kty"] != "RSA":
                raise ValueError(jwk["kty"])
            numbers = rsa.RSAPublicNumbers(int.from_bytes(_base64url(jwk["e"])), int.from_bytes(_base64url(jwk["n"])))
            return numbers.public_key()
        except (KeyError, TypeError, ValueError):
            raise not_authenticated("the session token carries no RSA public key (jwk)") from None

    @staticmethod
    def _check_date(value: str | None) -> None:
        try:
            sent = email.utils.parsedate_to_datetime(value or "")
        except (TypeError, ValueError):
            raise not_authenticated(f"the date header {value!r} is not an HTTP date") from None
        if sent.tzinfo is None:
            sent = sent.replace(tzinfo=UTC)
        skew = abs(time.time() - sent.timestamp())
        if skew > MAX_CLOCK_SKEW:
            raise not_authenticated(
                f"the date header is {skew:.0f} s from the server's clock (at most {MAX_CLOCK_SKEW:.0f} s are allowed)"
            )


def _base64url(text: str) -> bytes:
    """Unpadded base64url (RFC 7515), as in a JWT and a JWK; ValueError for anything else."""
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_ID = "[^/]+"
#: (method, path after /20210201, operation). The path parameters' names are the SDK's.
ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(path), operation)
    for method, path, operation in [
        ("POST", "/queues", "create_queue"),
        ("GET", "/queues", "list_queues"),
        ("GET", f"/queues/(?P<queueId>{_ID})", "get_queue"),
        ("PUT", f"/queues/(?P<queueId>{_ID})", "update_queue"),
        ("DELETE", f"/queues/(?P<queueId>{_ID})", "delete_queue"),
        ("POST", f"/queues/(?P<queueId>{_ID})/actions/purge", "purge_queue"),
        ("GET", f"/workRequests/(?P<workRequestId>{_ID})", "get_work_request"),
        ("GET", f"/queues/(?P<queueId>{_ID})/messages", "get_messages"),
        ("POST", f"/queues/(?P<queueId>{_ID})/messages", "put_messages"),
        ("POST", f"/queues/(?P<queueId>{_ID})/messages/actions/updateMessages", "update_messages"),
        ("POST", f"/queues/(?P<queueId>{_ID})/messages/actions/deleteMessages", "delete_messages"),
        ("PUT", f"/queues/(?P<queueId>{_ID})/messages/(?P<messageReceipt>{_ID})", "update_message"),
        ("DELETE", f"/queues/(?P<queueId>{_ID})/messages/(?P<messageReceipt>{_ID})", "delete_message"),
        ("GET", f"/queues/(?P<queueId>{_ID})/stats", "get_stats"),
        ("GET", f"/queues/(?P<queueId>{_ID})/channels", "list_channels"),
    ]
]


class Handler(BaseHTTPRequestHandler):
    """One HTTP request: read it, check its signature, route it to the service, answer JSON with opc-request-id."""

    def _gone(self) -> bool:
        """The client closed its end: its socket reads as end-of-file (a request's body has been read already)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    server: Server
    #: The operation the request being handled was routed to (None before routing, or for no route).
    operation: str | None = None
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects
    disable_nagle_algorithm = True  # headers and body are separate writes: without this each answer waits ~40 ms

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read failures from the SDK's exceptions, not from an access log."""

    def _handle(self) -> None:
        # The SDK sends its own opc-request-id; the answer carries it back (or a new one) on every response.
        request_id = self.headers.get("opc-request-id") or secrets.token_hex(16).upper()
        self.operation = None
        try:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            self.server.verifier.verify(self.command, self.path, self.headers, body)
            reply = self._dispatch(body)
        except ApiError as error:
            reply = Reply(error.status, {"code": error.code, "message": error.message}, error.headers)
        except Exception:  # a bug here must reach the client as the service's 500, and the log as a traceback
            traceback.print_exc()
            reply = Reply(500, {"code": "InternalServerError", "message": "the test server failed; see its stderr"})
        hang_up = self.server.service.modes.put_answer
        if self.operation == "put_messages" and reply.status == 200 and hang_up != "send":
            self._hang_up(hang_up == "reset")
            return
        data = b"" if reply.body is None else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("opc-request-id", request_id)
        if reply.body is not None:
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _hang_up(self, reset: bool) -> None:
        """End the connection without the answer (``--put-answer close`` or ``reset``): FIN, or RST."""
        self.close_connection = True
        if reset:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()

    def _dispatch(self, body: bytes) -> Reply:
        url = urlsplit(self.path)
        prefix = f"/{API_VERSION}"
        if not url.path.startswith(prefix + "/"):
            raise ApiError(404, "NotFound", f"there is no operation at {url.path} (API version {API_VERSION})")
        path = url.path[len(prefix) :]
        known_path = False
        for method, pattern, operation in ROUTES:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            known_path = True
            if method != self.command:
                continue
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                raise ApiError(400, "CannotParseRequest", "the request body is not JSON") from None
            query = {name: values[0] for name, values in parse_qs(url.query, keep_blank_values=True).items()}
            params = {name: unquote(value) for name, value in match.groupdict().items()}
            self.operation = operation
            fault = self.server.faults.take(operation)
            if fault is not None and not fault.get("done") and not fault.get("omit"):
                raise fault_error(fault)
            reply: Reply = getattr(self.server.service, operation)(
                Request(params, query, parsed, self._gone, self.server.endpoint)
            )
            if fault is not None and fault.get("omit"):
                return Reply(reply.status, {k: v for k, v in reply.body.items() if k not in fault["omit"]}, reply.headers)
            if fault is not None:
                raise fault_error(fault)
            return reply
        if known_path:
            raise ApiError(405, "MethodNotAllowed", f"{self.command} is not supported on {url.path}")
        raise ApiError(404, "NotFound", f"there is no operation at {url.path}")


class Server(ThreadingHTTPServer):
    """One listener on 127.0.0.1, one daemon thread per connection (long polls block only their own).

    Every listener serves the control plane and is one cell of the data plane; all share one :class:`QueueService`.
    """

    daemon_threads = True

    def __init__(self, port: int, verifier: SignatureVerifier, faults: Faults) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server_address[1]}"
        self.verifier = verifier
        self.faults = faults
        self.service: QueueService


def _exit_on_sigterm(signum: int, frame: object) -> NoReturn:
    sys.exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.oci.server", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--public-key", type=Path, required=True, help="PEM file of the API key's public half")
    parser.add_argument("--tenancy", required=True, help="tenancy OCID of the API key")
    parser.add_argument("--user", required=True, help="user OCID of the API key")
    parser.add_argument("--fingerprint", required=True, help="fingerprint of the API key")
    parser.add_argument(
        "--token-issuer-key",
        type=Path,
        help="PEM file of the public key whose session tokens (keyId ST$<token>) are accepted",
    )
    parser.add_argument("--ready-file", type=Path, help="write the endpoint here once the server listens")
    defaults = Modes()
    parser.add_argument(
        "--stale-receipt",
        choices=STALE_RECEIPT_ANSWERS,
        default=defaults.stale_receipt,
        help="the answer to a receipt that no longer names a current delivery: 400 InvalidParameter "
        "or 404 NotAuthorizedOrNotFound",
    )
    parser.add_argument(
        "--retention-bound",
        choices=RETENTION_BOUNDS,
        default=defaults.retention_bound,
        help="an update whose visibility would end after the message expires: refused (400) or cut short at the expiry",
    )
    parser.add_argument(
        "--put-answer",
        choices=PUT_ANSWERS,
        default=defaults.put_answer,
        help="after storing a PutMessages: send the answer, or close or reset the connection instead",
    )
    parser.add_argument(
        "--other-cell",
        choices=OTHER_CELL_ANSWERS,
        default=defaults.other_cell,
        help="a data-plane request for a queue at another cell's listener: 404 NotAuthorizedOrNotFound, "
        "or served as at the queue's own",
    )
    parser.add_argument(
        "--hung-up-poll",
        choices=HUNG_UP_POLLS,
        default=defaults.hung_up_poll,
        help="a long poll whose client hung up before a message came: deliver to it all the same, or withhold",
    )
    parser.add_argument(
        "--faults", type=Path, help="a JSON file of scripted faults, read again when it changes (see the module's docstring)"
    )
    args = parser.parse_args(argv)
    public_key = serialization.load_pem_public_key(args.public_key.read_bytes())
    if not isinstance(public_key, rsa.RSAPublicKey):
        parser.error(f"{args.public_key} is not an RSA public key")
    issuer = None
    if args.token_issuer_key:
        issuer = serialization.load_pem_public_key(args.token_issuer_key.read_bytes())
        if not isinstance(issuer, rsa.RSAPublicKey):
            parser.error(f"{args.token_issuer_key} is not an RSA public key")
    verifier = SignatureVerifier(f"{args.tenancy}/{args.user}/{args.fingerprint}", public_key, issuer)
    faults = Faults(args.faults)
    servers = [Server(args.port if cell == 0 else 0, verifier, faults) for cell in range(CELLS)]
    service = QueueService(
        [server.endpoint for server in servers],
        Modes(args.stale_receipt, args.retention_bound, args.put_answer, args.other_cell, args.hung_up_poll),
    )
    for server in servers:
        server.service = service
    server, *others = servers
    for other in others:
        threading.Thread(target=other.serve_forever, daemon=True, name=f"cell {other.endpoint}").start()
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    signal.signal(signal.SIGUSR1, lambda signum, frame: service.move_queues())
    print(READY_LINE.format(endpoint=server.endpoint, cells=" ".join(service.cells)), flush=True)
    if args.ready_file:
        partial = args.ready_file.with_name(args.ready_file.name + ".partial")
        partial.write_text(server.endpoint + "\n")
        partial.replace(args.ready_file)  # readers never see half a file
    try:
        server.serve_forever()
    finally:
        for each in servers:
            each.server_close()


if __name__ == "__main__":
    main()
