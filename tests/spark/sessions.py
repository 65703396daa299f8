"""In-process Spark sessions shared by the tests of one process, as a long-running worker shares its session.

A host run in a test is handed a :class:`~worker.middleware.spark.Spark`
middleware over a provider from here instead of building (and stopping) a
session of its own, so a JVM and its first jobs are paid once per master, not
per test. A process holds at most one session: PySpark allows one
SparkContext and refuses a Connect session beside it, so asking for another
master stops the session before. The Spark tests run in one process
(tests/tiers.py), ordered by master, so that happens once or twice a run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import JVM_OPTIONS
from tests.host.processes import REPO
from worker.middleware.spark import Spark, SparkProvider, SparkSettings

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
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1", "spark.executor.memory": "512m",
        "spark.cores.max": "2", "spark.executorEnv.PYTHONPATH": str(REPO),
        "spark.executor.extraJavaOptions": JVM_OPTIONS,
    }


class SparkSessions:
    """The provider of the last master and settings asked for; asking for others stops it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._key: tuple[str, tuple[tuple[str, str], ...]] | None = None
        self._provider: SparkProvider | None = None

    def provider(self, master: str, conf: dict[str, str]) -> SparkProvider:
        key = (master, tuple(sorted(conf.items())))
        if self._provider is None or key != self._key:
            self.stop()
            log_file = None if master.startswith("sc://") else self.folder / "spark.log"
            self._key, self._provider = key, SparkProvider(SparkSettings(master, conf=dict(conf), log_file=log_file))
        return self._provider

    def middleware(self, master: str, conf: dict[str, str]) -> Spark:
        """The middleware a test's host gets: the shared provider, left running when the host stops."""
        return Spark(self.provider(master, conf), owned=False)

    @contextmanager
    def private(self, master: str, conf: dict[str, str]) -> Iterator[SparkProvider]:
        """A provider of the caller's own, not yet started, stopped when the block ends: for a test that watches a
        session start, or kills it.

        The shared session is stopped first (one per process); the next test that asks for it makes it again.
        """
        self.stop()
        log_file = None if master.startswith("sc://") else self.folder / "spark.log"
        provider = SparkProvider(SparkSettings(master, conf=dict(conf), log_file=log_file))
        try:
            yield provider
        finally:
            provider.stop()

    def stop(self) -> None:
        if self._provider is not None:
            self._provider.stop()
        self._key = self._provider = None
