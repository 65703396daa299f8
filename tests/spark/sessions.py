"""In-process Spark sessions shared by the tests of one process, as a long-running worker shares its session.

A host run in a test is handed a :class:`~worker.middleware.spark.Spark`
middleware over a provider from here instead of building (and stopping) a
session of its own, so a JVM and its first jobs are paid once per master, not
per test. A process holds at most one session: PySpark allows one
SparkContext and refuses a Connect session beside it, so asking for another
master stops the session before. The Spark tests run in two processes, each
with its own servers and session (the ``spark`` and ``spark-pipeline`` groups
of tests/tiers.py), ordered by master, so that happens twice a process at most.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.host.processes import REPO
from tests.spark import jvm
from worker.middleware.spark import Spark, SparkProvider, SparkSettings

if TYPE_CHECKING:
    from tests.spark.cluster import ConnectServer

#: How long jobs a test just cancelled may take to end before the test counts as having left them running.
IDLE_WITHIN_SECONDS = 20.0

#: What PySpark writes into its process's environment while a session is open (a Connect session marks the
#: whole process as Connect), and what would point a worker at another storage account or settings.
NOT_INHERITED = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "AzureWebJobsStorage")


def process_env(**extra: str) -> dict[str, str]:
    """The environment for a worker process started by a Spark test: this one's, without the session's marks."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED and not k.startswith("WORKER__")}
    return env | extra


def master_and_conf(where: str, request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """The master and settings every Spark test in this process uses on ``where`` (local, cluster, connect).

    One pair per master, so that the tests of every module share its session instead of restarting it
    with settings that differ in some detail.
    """
    conf = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}
    if where == "local":
        return "local[2]", conf
    if where == "connect":  # the UI is the server's, not the session's to set
        return request.getfixturevalue("spark_connect").url, {"spark.sql.shuffle.partitions": "2"}
    return request.getfixturevalue("spark_cluster").url, conf | {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
        "spark.executorEnv.PYTHONPATH": str(REPO),
        "spark.executor.extraJavaOptions": jvm.options(),
    }


class SparkSessions:
    """The provider of the last master and settings asked for; asking for others stops it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._key: tuple[str, tuple[tuple[str, str], ...]] | None = None
        self._provider: SparkProvider | None = None
        #: The Connect servers every test of the process shares (the ``spark_connect`` fixture's), by URL.
        self.servers: dict[str, ConnectServer] = {}

    def settings(self, master: str, conf: dict[str, str], **given: Any) -> SparkSettings:
        """A session's settings (``given`` overrides the rest); a shared Connect server's web UI is given, as
        ``spark.webUi`` would give it."""
        log_file = None if master.startswith("sc://") else self.folder / "spark.log"
        server = self.servers.get(master)
        settings: dict[str, Any] = {"log_file": log_file, "web_ui": server.web_ui if server else None, **given}
        return SparkSettings(master, conf=dict(conf), **settings)

    def provider(self, master: str, conf: dict[str, str]) -> SparkProvider:
        key = (master, tuple(sorted(conf.items())))
        if self._provider is None or key != self._key:
            self.stop()
            self._key, self._provider = key, SparkProvider(self.settings(master, conf))
        return self._provider

    def middleware(self, master: str, conf: dict[str, str]) -> Spark:
        """The middleware a test's host gets: the shared provider, left running when the host stops."""
        return Spark(self.provider(master, conf), owned=False)

    @contextmanager
    def private(self, master: str, conf: dict[str, str], **given: Any) -> Iterator[SparkProvider]:
        """A provider of the caller's own, not yet started, stopped when the block ends: for a test that watches a
        session start, or kills it.

        The shared session is stopped first (one per process); the next test that asks for it makes it again.
        """
        self.stop()
        provider = SparkProvider(self.settings(master, conf, **given))
        try:
            yield provider
        finally:
            provider.stop()

    def left_running(self) -> list[str]:
        """What the last test left running on the shared Spark servers and in this process's session, after the
        time cancelled jobs take to end; whatever is left is cancelled (or its server restarted), so that the next
        tests start on idle servers whatever this one did."""
        left: list[str] = []
        for server in self.servers.values():
            if jobs := _still(server.running_jobs):
                server.kill_jobs(jobs)
                left.append(f"jobs {jobs} on the Connect server {server.url}")
                if _still(server.running_jobs):
                    server.restart()
        from py4j.protocol import Py4JError
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        if context is not None and context._jsc is not None:
            try:
                tracker = context.statusTracker()
                if jobs := _still(lambda: list(tracker.getActiveJobsIds())):
                    context.cancelAllJobs()
                    left.append(f"jobs {jobs} in this process's session on {context.master}")
            except Py4JError:  # its JVM is gone (a test killed it): it runs nothing
                pass
        return left

    def leave(self, master: str) -> None:
        """Stop the shared session if it is on ``master``: for a test whose worker process runs an application of
        its own on the shared standalone cluster, whose one worker's cores (``spark.cores.max``) the session holds
        while it lives, so that the other application would wait for executors that never come."""
        if self._key is not None and self._key[0] == master:
            self.stop()

    def stop(self) -> None:
        if self._provider is not None:
            self._provider.stop()
        self._key = self._provider = None


def _still(running: Callable[[], list[int]]) -> list[int]:
    """What ``running()`` lists once it lists nothing, or still lists after :data:`IDLE_WITHIN_SECONDS`."""
    deadline = time.monotonic() + IDLE_WITHIN_SECONDS
    while True:
        try:
            jobs = running()
        except OSError:  # a web UI slow to answer on a loaded machine: asked again until the deadline
            if time.monotonic() > deadline:
                raise
            jobs = [-1]
        if not jobs or time.monotonic() > deadline:
            return jobs
        time.sleep(0.2)
