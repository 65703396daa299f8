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
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
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
#: Request headers not passed on to moto: the connection's own, which the proxy makes afresh.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


class SqsRules:
    """moto's server at ``upstream`` as SQS behaves where moto does not; :attr:`endpoint` is what a client uses.

    :attr:`requests` names the SQS operations that reached the proxy, in order, so a test can count what a backend
    sent (a refusal retried would show as several CreateQueue).
    """

    def __init__(self, upstream: str, recreate_after: float = RECREATE_AFTER) -> None:
        self.upstream = urlsplit(upstream)
        self.recreate_after = recreate_after
        self.requests: list[str] = []
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
                status, headers, answer = rules._forward(self.command, self.path, self.headers.items(), body)
                if operation == "DeleteQueue" and status == 200:
                    rules._deleted_now(body)
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
        headers = [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-RequestId", str(uuid.uuid4())),
                   ("x-amzn-query-error", f"{DELETED_RECENTLY_CODE};Sender")]
        return DELETED_RECENTLY_STATUS, headers, json.dumps(DELETED_RECENTLY_BODY).encode()

    def _deleted_now(self, body: bytes) -> None:
        url = json.loads(body or b"{}").get("QueueUrl", "")
        with self._lock:
            self._deleted[url.rstrip("/").rsplit("/", 1)[-1]] = time.monotonic()

    def _forward(self, method: str, path: str, headers: list[tuple[str, str]],
                 body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """The request as sent, to moto; its answer as moto gave it. A long poll holds this thread for its wait."""
        upstream = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=60)
        try:
            upstream.request(method, path, body=body,
                             headers={k: v for k, v in headers if k.lower() not in HOP_BY_HOP})
            answer = upstream.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            upstream.close()
