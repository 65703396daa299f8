"""Spark Connect jobs that outlived their operation: found and cancelled through the server's web UI.

An interrupt can miss a shuffle job that AQE submits from another thread (SPARK-52024; seen on Spark 4.3).
That job belongs to no operation: ``interruptTag``, ``interruptAll`` and a release all leave it running.
It still carries the session's tag, so the host kills it through the web UI (``spark.webUi``).
The tag's form is the server's own, undocumented (:func:`session_tag_suffix`).
Where no job has that form, a tag ending with the invocation's own is taken, after one warning.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import urllib.parse
import urllib.request

import structlog

from worker.dependencies import fall_back

log = structlog.get_logger("worker.spark")

#: How long after an interrupted handler returned the host watches for its jobs to appear on the server.
WATCH_SECONDS = 10.0
#: How long the host keeps cancelling them at most.
GIVE_UP_SECONDS = 60.0
#: Between two looks at the server's running jobs.
POLL_SECONDS = 0.5
#: One request to the web UI.
REQUEST_SECONDS = 10.0

_CSRF = re.compile(r'name="csrfToken" value="([^"]+)"')


class ConnectWebUi:
    """The web UI of a Spark Connect server (``http://host:4040``): its running jobs, and a job's kill."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _get(self, path: str) -> bytes:
        answer: http.client.HTTPResponse  # what urlopen gives for an http:// URL (typeshed says Any)
        with urllib.request.urlopen(f"{self.url}{path}", timeout=REQUEST_SECONDS) as answer:
            return answer.read()

    def running_job_tags(self) -> dict[int, list[str]]:
        """The running jobs' ids, each with its tags."""
        applications = json.loads(self._get("/api/v1/applications"))
        found: dict[int, list[str]] = {}
        for application in applications:
            jobs = json.loads(self._get(f"/api/v1/applications/{application['id']}/jobs?status=running"))
            found.update({job["jobId"]: list(job.get("jobTags", ())) for job in jobs})
        return found

    def running_jobs(self, tag_suffix: str = "") -> list[int]:
        """The ids of the running jobs one of whose tags ends with ``tag_suffix`` (every running job for "")."""
        return _ending(self.running_job_tags(), tag_suffix)

    def kill(self, job_id: int) -> None:
        """Kill a job as the UI's kill link does: the UI refuses a kill without the token its jobs page carries."""
        token = _CSRF.search(self._get("/jobs/").decode("utf-8", "replace"))
        form = {"id": str(job_id), "terminate": "true", **({"csrfToken": token[1]} if token else {})}
        request = urllib.request.Request(f"{self.url}/jobs/job/kill/", data=urllib.parse.urlencode(form).encode())
        with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as answer:
            answer.read()


def _ending(jobs: dict[int, list[str]], suffix: str) -> list[int]:
    """The jobs one of whose tags ends with ``suffix``."""
    return [job for job, tags in jobs.items() if any(tag.endswith(suffix) for tag in tags)]


def session_tag_suffix(session_id: str, tag: str) -> str:
    """How a Connect session's tag ends as a Spark job tag on the server (``..._Session_<id>_Tag_<tag>``)."""
    return f"_Session_{session_id}_Tag_{tag}"


def cancel_left_jobs(
    ui: ConnectWebUi, session_id: str, tag: str, *, watch: float = WATCH_SECONDS, give_up: float = GIVE_UP_SECONDS
) -> list[int]:
    """Kill the jobs of ``tag`` still running on the server, watching ``watch`` seconds for late ones; returns them.

    Called once the interrupted handler returned, so any job of its tag still
    running (or submitted within the watch) belongs to no operation. A UI that
    does not answer is asked again: a server just resumed or overloaded (the
    very case that leaves such jobs) may not answer its first requests in
    time, and its web API starts on the first request. Stops after
    ``give_up`` seconds whatever happens, saying so if the UI never answered
    meanwhile: the job then runs to its end, as it would without this.
    """
    suffix = session_tag_suffix(session_id, tag)
    killed: list[int] = []
    began = last_seen = time.monotonic()
    failure: str | None = None
    pause = threading.Event()
    while (now := time.monotonic()) - began < give_up:
        try:
            jobs = ui.running_job_tags()
            running = _ending(jobs, suffix)
            if not running and (running := _ending(jobs, tag)):
                fall_back(
                    "pyspark",
                    "a Connect session's tag among a job's tags, as ..._Session_<id>_Tag_<tag>",
                    "an interrupted invocation's left jobs are found by its own tag alone",
                )
            for job in running:
                ui.kill(job)
                if job not in killed:
                    killed.append(job)
        except (OSError, ValueError) as exc:
            if failure is None:
                log.warning(
                    "the Connect server's web UI did not answer; asking again",
                    tag=tag,
                    web_ui=ui.url,
                    error=f"{type(exc).__name__}: {exc}",
                )
            failure = f"{type(exc).__name__}: {exc}"
            pause.wait(POLL_SECONDS)
            continue
        failure = None
        if running:
            last_seen = now
        elif now - last_seen >= watch:
            break
        pause.wait(POLL_SECONDS)
    if failure is not None:
        log.error(
            "cannot cancel through the Connect server's web UI the Spark jobs an interrupt left running",
            tag=tag,
            web_ui=ui.url,
            error=failure,
            seconds=give_up,
        )
    if killed:
        log.warning(
            "Spark jobs of an interrupted invocation outlived its operation on the Connect server; "
            "cancelled through its web UI",
            tag=tag,
            jobs=killed,
        )
    return killed
