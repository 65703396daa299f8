"""Real Spark servers for the tests, on loopback: a standalone cluster and Spark Connect, as ``worker spark`` starts them.

The processes are :mod:`worker.ops.spark_cluster`'s, the module behind
``worker spark start-cluster`` and ``start-connect``: JVMs from the installed
pyspark on free ports, their state (pids, logs, the worker's ``--work-dir``)
under the test run's temporary folder, each ready when its log says so. The
cluster is a master and one worker of two cores; the Connect server runs
``local[2]``, and its Python workers run this interpreter with the repository
on their path, as a Connect server set up for an app would.
"""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support import free_port
from worker.middleware.connect_jobs import ConnectWebUi
from worker.ops import spark_cluster

REPO = Path(__file__).resolve().parents[2]


class StandaloneCluster:
    """A master and one worker (``cores`` cores, ``memory`` for executors); ``url`` is the master's spark:// URL."""

    def __init__(self, folder: Path, cores: int = 2, memory: str = "1g") -> None:
        self.folder = folder
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        #: The master's web UI, once started.
        self.web_ui: str | None = None

    def start(self, timeout: float = 120) -> StandaloneCluster:
        master, _ = spark_cluster.start_cluster(
            self.folder, port=self.port, cores=self.cores, memory=self.memory, timeout=timeout
        )
        self.web_ui = master.web_ui
        return self

    def kill_application(self, app_id: str) -> None:
        """Have the master remove an application, as its web UI's kill link does: the master stops its executors
        and tells the driver, whose SparkContext then stops.

        The UI refuses a kill without the CSRF token its page's kill form carries, so the page is read first.
        """
        assert self.web_ui is not None
        with urllib.request.urlopen(f"{self.web_ui}/", timeout=30) as page:
            token = re.search(r'name="csrfToken" value="([^"]+)"', page.read().decode())
        assert token is not None, "the master's page has no kill form: is the application registered?"
        form = urllib.parse.urlencode({"id": app_id, "terminate": "true", "csrfToken": token[1]}).encode()
        with urllib.request.urlopen(f"{self.web_ui}/app/kill/", data=form, timeout=30) as answer:
            answer.read()

    def stop(self) -> None:
        spark_cluster.stop(self.folder)


class ConnectServer:
    """A Spark Connect server on ``local[2]``; ``url`` is its ``sc://`` address, ``web_ui`` its web UI's (through
    which a test sees the jobs it runs, and the host cancels jobs an interrupt could not reach).

    ``port``: a given one, for a server that stands in for another one stopped (a restart); else a free one.
    """

    def __init__(self, folder: Path, port: int | None = None) -> None:
        self.folder = folder
        self.port = port or free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.web_ui: str | None = None
        self._server: spark_cluster.Server | None = None

    def start(self, timeout: float = 120) -> ConnectServer:
        self._server = spark_cluster.start_connect(
            self.folder,
            port=self.port,
            master="local[2]",
            name="queueworker-tests",
            env={"PYTHONPATH": str(REPO)},
            timeout=timeout,
        )
        self.web_ui = self._server.web_ui
        return self

    def running_jobs(self) -> list[int]:
        """The ids of the jobs running on the server now."""
        assert self.web_ui is not None
        return ConnectWebUi(self.web_ui).running_jobs()

    def idle(self) -> bool:
        """Whether the server runs no job; False as well when its web UI does not answer within the request's
        timeout, as a server just resumed from a pause may not on a loaded machine: a poll asks again."""
        try:
            return not self.running_jobs()
        except (TimeoutError, urllib.error.URLError):
            return False

    def kill_jobs(self, jobs: list[int]) -> None:
        assert self.web_ui is not None
        ui = ConnectWebUi(self.web_ui)
        for job in jobs:
            ui.kill(job)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The server stopped with SIGSTOP (it accepts nothing and answers nothing) until the block ends.

        ``spark-submit`` execs the JVM, so the process started is the server itself.
        """
        assert self._server is not None
        os.kill(self._server.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self._server.pid, signal.SIGCONT)

    def restart(self, timeout: float = 120) -> None:
        """Stop the server and start another on its port (the same ``url``), once the port can be had again."""
        self.stop()
        deadline = time.monotonic() + timeout
        while True:
            try:
                spark_cluster.claim_port("127.0.0.1", self.port)
                break
            except spark_cluster.SparkServerError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.start(timeout)

    def stop(self) -> None:
        spark_cluster.stop(self.folder)
        self._server = None
