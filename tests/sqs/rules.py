"""A test server mode for what moto does not do as SQS does: moto's server behind a proxy on a loopback port of its
own, which passes every request through unchanged and answers itself only where SQS's documented behaviour differs.

The rule it keeps: a queue of a deleted queue's name cannot be created for 60 seconds. The SQS API Reference says so
under CreateQueue ("If you delete a queue, you must wait at least 60 seconds before creating a queue with the same
name", https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html) and lists the
error, ``QueueDeletedRecently``, HTTP 400; botocore's SQS model (2012-11-05) has the same shape among CreateQueue's
errors. moto creates the queue at once.

The answer is the one SQS gives on the AWS JSON 1.0 protocol it now speaks: the JSON body's ``__type`` is the shape
name, and, because SQS's model is ``awsQueryCompatible``, an ``x-amzn-query-error`` header carries the older query
API's code and fault (``AWS.SimpleQueueService.QueueDeletedRecently;Sender``), which botocore reports as the error
code, as programs written against SQS test for it
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-json-faqs.html). The message is the
text SQS sends with it.

The window is SQS's 60 s unless a test asks for a shorter one, to see what happens after it ends without waiting a
minute; a delete starts it only when moto answered the delete with success.

With ``strict=True`` the proxy also keeps what SQS documents about receipt handles and visibility, where moto is
kinder (moto takes any handle a message ever had), taking the worse reading wherever the documents say "may":

- A receive supersedes every earlier handle of its messages. ChangeMessageVisibility (and each entry of
  ChangeMessageVisibilityBatch) with a superseded handle is refused with ``stale_code``: InvalidParameterValue
  ("Value ... for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for
  visibility timeout change.", the default), MessageNotInflight or ReceiptHandleIsInvalid, each among the errors
  the API Reference lists for it. DeleteMessage with one is answered 200 and deletes nothing: the API Reference's
  DeleteMessage says that for a handle a later receive replaced "the request succeeds, but the message might not
  be deleted"; so is such an entry of DeleteMessageBatch.
- A message's visibility cannot end more than ``cap`` seconds (SQS's 12 hours unless a test asks for less) after
  the receive that handed out its handle: the API Reference's ReceiveMessage says the visibility timeout "begins
  when you call ReceiveMessage", and ChangeMessageVisibility that a change past the maximum is rejected
  (InvalidParameterValue, "Total VisibilityTimeout for the message is beyond the limit").
- ``over_limit`` ReceiveMessage requests in a row are answered 403 OverLimit, as SQS answers a receive once a queue
  has 120,000 messages in flight (the API Reference's ReceiveMessage); the rest pass on.
- ``first_received_ago`` sets back each received message's ``ApproximateFirstReceiveTimestamp`` by that many
  seconds: a message first received long before this receive.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

#: How long SQS refuses a deleted queue's name (the API Reference's CreateQueue).
RECREATE_AFTER = 60.0
#: What SQS answers CreateQueue within that time: status, headers and body on the JSON protocol.
DELETED_RECENTLY_STATUS = 400
DELETED_RECENTLY_CODE = "AWS.SimpleQueueService.QueueDeletedRecently"
DELETED_RECENTLY_BODY = {
    "__type": "com.amazonaws.sqs#QueueDeletedRecently",
    "message": "You must wait 60 seconds after deleting a queue before you can create another with the same name.",
}
#: SQS's 12-hour visibility maximum, in seconds.
MAX_VISIBILITY = 43200
#: Strict mode's answers to a superseded receipt handle on a visibility change: (query code, JSON shape, message).
STALE_ANSWERS = {
    "InvalidParameterValue": (
        "InvalidParameterValue",
        "InvalidParameterValue",
        "Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not exist "
        "or is not available for visibility timeout change.",
    ),
    "MessageNotInflight": (
        "AWS.SimpleQueueService.MessageNotInflight",
        "MessageNotInflight",
        "The message referred to isn't in flight.",
    ),
    "ReceiptHandleIsInvalid": (
        "ReceiptHandleIsInvalid",
        "ReceiptHandleIsInvalid",
        'The input receipt handle "{handle}" is not a valid receipt handle.',
    ),
}
#: Request headers not passed on to moto: the connection's own, which the proxy makes afresh.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


class SqsRules:
    """moto's server at ``upstream`` as SQS behaves where moto does not; :attr:`endpoint` is what a client uses.

    :attr:`requests` names the SQS operations that reached the proxy, in order, so a test can count what a backend
    sent (a refusal retried would show as several CreateQueue).
    """

    def __init__(
        self,
        upstream: str,
        recreate_after: float = RECREATE_AFTER,
        *,
        strict: bool = False,
        stale_code: str = "InvalidParameterValue",
        cap: float = MAX_VISIBILITY,
        first_received_ago: float = 0,
        over_limit: int = 0,
    ) -> None:
        self.upstream = urlsplit(upstream)
        self.recreate_after = recreate_after
        self.strict = strict
        self.stale_code = stale_code
        self.cap = cap
        self.first_received_ago = first_received_ago
        self.over_limit = over_limit
        self.requests: list[str] = []
        #: Strict mode: each message's latest handle, by message id; each handle's message and receive time.
        self._latest: dict[str, str] = {}
        self._handles: dict[str, tuple[str, float]] = {}
        #: What strict mode answered itself: (operation, message id, what), in order.
        self.answered: list[tuple[str, str, str]] = []
        #: When each queue name was last deleted (time.monotonic()), by name.
        self._deleted: dict[str, float] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def connection(self, region: str, long_poll: int = 2, **options: str) -> str:
        """An ``sqs://`` connection string to this proxy (as :meth:`tests.moto.Moto.connection` makes for moto)."""
        extra = "".join(f"&{k}={v}" for k, v in options.items())
        return f"sqs://?region={region}&endpoint={self.endpoint}&longPoll={long_poll}{extra}"

    def start(self) -> SqsRules:
        rules = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # botocore keeps its connections open

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                operation = (self.headers.get("X-Amz-Target") or "").rpartition(".")[2]
                with rules._lock:
                    rules.requests.append(operation)
                refused = rules._refusal(operation, body)
                if refused is not None:
                    self._answer(*refused)
                    return
                headers_in = list(self.headers.items())
                if operation == "ReceiveMessage" and rules._held_back():
                    self._answer(
                        403,
                        [
                            ("Content-Type", "application/x-amz-json-1.0"),
                            ("x-amzn-RequestId", str(uuid.uuid4())),
                            ("x-amzn-query-error", "OverLimit;Sender"),
                        ],
                        json.dumps(
                            {"__type": "com.amazonaws.sqs#OverLimit", "message": "Too many messages in flight."}
                        ).encode(),
                    )
                    return
                if rules.strict and operation in (
                    "ChangeMessageVisibility",
                    "ChangeMessageVisibilityBatch",
                    "DeleteMessage",
                    "DeleteMessageBatch",
                ):
                    self._answer(
                        *rules._strictly(
                            operation, body, lambda sent: rules._forward(self.command, self.path, headers_in, sent)
                        )
                    )
                    return
                status, headers, answer = rules._forward(self.command, self.path, headers_in, body)
                if operation == "DeleteQueue" and status == 200:
                    rules._deleted_now(body)
                if rules.strict and operation == "ReceiveMessage" and status == 200:
                    answer = rules._received(answer)
                self._answer(status, headers, answer)

            do_GET = do_POST

            def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the tests read :attr:`SqsRules.requests`."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="sqs-rules", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._server = None

    def _refusal(self, operation: str, body: bytes) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """SQS's QueueDeletedRecently answer for a CreateQueue inside the window of its name's delete; else None."""
        if operation != "CreateQueue":
            return None
        name = json.loads(body or b"{}").get("QueueName", "")
        with self._lock:
            deleted = self._deleted.get(name)
        if deleted is None or time.monotonic() - deleted >= self.recreate_after:
            return None
        headers = [
            ("Content-Type", "application/x-amz-json-1.0"),
            ("x-amzn-RequestId", str(uuid.uuid4())),
            ("x-amzn-query-error", f"{DELETED_RECENTLY_CODE};Sender"),
        ]
        return DELETED_RECENTLY_STATUS, headers, json.dumps(DELETED_RECENTLY_BODY).encode()

    def _held_back(self) -> bool:
        """Whether this receive is one of the ``over_limit`` answered OverLimit."""
        with self._lock:
            if self.over_limit <= 0:
                return False
            self.over_limit -= 1
            return True

    def latest(self, message_id: str) -> str:
        """The handle the latest receive of ``message_id`` handed out (strict mode)."""
        with self._lock:
            return self._latest[message_id]

    def _received(self, answer: bytes) -> bytes:
        """Note each received message's handle as its latest; set back its first receive if asked."""
        got = json.loads(answer or b"{}")
        now = time.monotonic()
        with self._lock:
            for message in got.get("Messages", []):
                handle, message_id = message["ReceiptHandle"], message["MessageId"]
                self._latest[message_id] = handle
                self._handles[handle] = (message_id, now)
                attributes = message.get("Attributes", {})
                if self.first_received_ago and "ApproximateFirstReceiveTimestamp" in attributes:
                    first = int(attributes["ApproximateFirstReceiveTimestamp"]) - int(self.first_received_ago * 1000)
                    attributes["ApproximateFirstReceiveTimestamp"] = str(first)
        return json.dumps(got).encode()

    def _refused_entry(self, operation: str, handle: str, visibility: int | None) -> tuple[str, str, str] | None:
        """Strict mode's refusal of one handle (query code, JSON shape, message), or None to pass it on."""
        with self._lock:
            message_id, received = self._handles.get(handle, ("", 0.0))
            superseded = bool(message_id) and self._latest.get(message_id) != handle
        if not message_id:
            return None
        if superseded:
            self.answered.append((operation, message_id, "superseded"))
            code, shape, text = STALE_ANSWERS[self.stale_code]
            return code, shape, text.format(handle=handle)
        if visibility is not None and time.monotonic() - received + visibility > self.cap:
            self.answered.append((operation, message_id, "past the maximum"))
            return (
                "InvalidParameterValue",
                "InvalidParameterValue",
                f"Value {visibility} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout "
                f"for the message is beyond the limit [{self.cap:g} seconds]",
            )
        return None

    def _superseded_delete(self, operation: str, handle: str) -> bool:
        """A delete with a superseded handle: answered as done, and nothing deleted."""
        with self._lock:
            message_id = self._handles.get(handle, ("", 0.0))[0]
            superseded = bool(message_id) and self._latest.get(message_id) != handle
        if superseded:
            self.answered.append((operation, message_id, "succeeded without deleting"))
        return superseded

    def _strictly(
        self, operation: str, body: bytes, forward: Callable[[bytes], tuple[int, list[tuple[str, str]], bytes]]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """A visibility change or delete, alone or in a batch, as strict mode answers it."""
        request = json.loads(body or b"{}")
        json_headers = [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-RequestId", str(uuid.uuid4()))]
        if operation in ("ChangeMessageVisibility", "DeleteMessage"):
            handle = request.get("ReceiptHandle", "")
            if operation == "DeleteMessage":
                return (200, json_headers, b"{}") if self._superseded_delete(operation, handle) else forward(body)
            refused = self._refused_entry(operation, handle, int(request.get("VisibilityTimeout", 0)))
            if refused is None:
                return forward(body)
            code, shape, text = refused
            return (
                400,
                [*json_headers, ("x-amzn-query-error", f"{code};Sender")],
                json.dumps({"__type": f"com.amazonaws.sqs#{shape}", "message": text}).encode(),
            )
        failed, done, passed = [], [], []
        for entry in request.get("Entries", []):
            if operation == "DeleteMessageBatch":
                if self._superseded_delete(operation, entry["ReceiptHandle"]):
                    done.append({"Id": entry["Id"]})
                    continue
            elif (
                refused := self._refused_entry(operation, entry["ReceiptHandle"], int(entry.get("VisibilityTimeout", 0)))
            ) is not None:
                failed.append({"Id": entry["Id"], "SenderFault": True, "Code": refused[0], "Message": refused[2]})
                continue
            passed.append(entry)
        if passed:
            status, headers, answer = forward(json.dumps({**request, "Entries": passed}).encode())
            if status != 200:
                return status, headers, answer
            got = json.loads(answer or b"{}")
            done += got.get("Successful", [])
            failed += got.get("Failed", [])
        return 200, json_headers, json.dumps({"Successful": done, "Failed": failed}).encode()

    def _deleted_now(self, body: bytes) -> None:
        url = json.loads(body or b"{}").get("QueueUrl", "")
        with self._lock:
            self._deleted[url.rstrip("/").rsplit("/", 1)[-1]] = time.monotonic()

    def _forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """The request as sent, to moto; its answer as moto gave it. A long poll holds this thread for its wait."""
        upstream = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=60)
        try:
            upstream.request(method, path, body=body, headers={k: v for k, v in headers if k.lower() not in HOP_BY_HOP})
            answer = upstream.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            upstream.close()
