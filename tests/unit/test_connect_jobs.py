"""The host's cancel of the Connect jobs an interrupt left running, against a web UI that does not answer at first.

A real Connect server's UI is driven by tests/spark/test_spark_leases.py (a paused server, then its orphan job
killed). Here a small HTTP server answers the two REST calls and the kill form as Spark's UI does, but lets its first
request wait past the host's timeout, as a server just resumed on a loaded machine did (its web API starts on the
first request): the host must ask again rather than give up and leave the job running. A server that writes a
session's tag in another form (the form is Spark's own, not its API) still has the job killed, by the invocation's tag.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support import captured_logs
from worker import dependencies
from worker.middleware import connect_jobs
from worker.middleware.connect_jobs import ConnectWebUi, cancel_left_jobs, session_tag_suffix

TAG = "worker-invocation-1"
SESSION = "s-1"


class SlowFirstUi(ThreadingHTTPServer):
    """One application with job 7 running under the invocation's tag until it is killed; the first request waits."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests = 0
        self.running = {7}
        self.killed: list[int] = []
        self.release = threading.Event()
        #: The running jobs' tags: the invocation's, in the form Spark 4 gives a Connect session's tags.
        self.tags = [f"spark-connect{session_tag_suffix(SESSION, TAG)}"]


class Handler(BaseHTTPRequestHandler):
    server: SlowFirstUi

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, body: object | str) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.requests += 1
        if self.server.requests == 1:
            self.server.release.wait(10)  # past the host's timeout: it gives up on this request
        if self.path == "/api/v1/applications":
            self._answer([{"id": "app-1"}])
        elif self.path.startswith("/api/v1/applications/app-1/jobs"):
            self._answer([{"jobId": job, "jobTags": self.server.tags} for job in sorted(self.server.running)])
        else:  # the jobs page, which carries the kill form's token
            self._answer('<input name="csrfToken" value="t">')

    def do_POST(self) -> None:  # noqa: N802
        form = self.rfile.read(int(self.headers["Content-Length"])).decode()
        job = int(dict(part.split("=") for part in form.split("&"))["id"])
        self.server.running.discard(job)
        self.server.killed.append(job)
        self._answer("")


@pytest.fixture
def ui() -> Iterator[SlowFirstUi]:
    server = SlowFirstUi()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def test_a_web_ui_that_does_not_answer_at_first_is_asked_again_and_the_left_job_killed(
    ui: SlowFirstUi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connect_jobs, "REQUEST_SECONDS", 0.5)

    killed = cancel_left_jobs(ConnectWebUi(f"http://127.0.0.1:{ui.server_address[1]}"), SESSION, TAG, watch=0.5, give_up=20)

    assert killed == [7]
    assert ui.killed == [7] and not ui.running


def test_jobs_whose_tags_have_another_form_are_found_by_the_invocations_tag_after_one_warning(
    ui: SlowFirstUi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that writes a session's tag in a form of its own (the form is not part of Spark's API)."""
    ui.release.set()  # this UI answers at once
    ui.running |= {8, 9}
    ui.tags = [f"SparkConnect_OperationTag_{SESSION}:{TAG}"]
    dependencies._once.cache_clear()
    with captured_logs(monkeypatch, dependencies) as logs:
        killed = cancel_left_jobs(
            ConnectWebUi(f"http://127.0.0.1:{ui.server_address[1]}"), SESSION, TAG, watch=0.5, give_up=20
        )

    assert sorted(killed) == [7, 8, 9] and not ui.running
    warnings = [line for line in logs if line.get("dependency") == "pyspark"]
    assert len(warnings) == 1 and "_Session_<id>_Tag_<tag>" in warnings[0]["part"]
