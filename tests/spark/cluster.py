"""Real Spark servers for the tests, from the installed pyspark, on loopback: a standalone cluster and Spark Connect.

All are JVMs on free ports. The cluster is a master and one worker started
with ``bin/spark-class`` (the worker's ``--work-dir`` under the test run's
temporary folder), ready when they log so ("I have been elected leader",
"Successfully registered with master"). The Connect server is
``SparkConnectServer`` through ``bin/spark-submit`` on ``local[2]``, ready on
"Spark Connect server started"; its Python workers run this interpreter with
the repository on their path, as a Connect server set up for an app would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

from tests.support import free_port, poll

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
SPARK_SUBMIT = SPARK_HOME / "bin" / "spark-submit"
REPO = Path(__file__).resolve().parents[2]


class _Daemon:
    """One spark-class process whose output is kept for readiness checks and failure messages."""

    def __init__(self, name: str, command: list[str], log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.output: list[str] = []
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOG_DIR": str(log_dir), "SPARK_NO_DAEMONIZE": "1", **(env or {})}
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     cwd=REPO)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def wait_for(self, text: str, timeout: float) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{''.join(self.output[-40:])}")
            return any(text in line for line in list(self.output))

        poll(seen, timeout, interval=0.2, what=f"the Spark {self.name} to log {text!r}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class StandaloneCluster:
    """A master and one worker (``cores`` cores, ``memory`` for executors); ``url`` is the master's spark:// URL."""

    def __init__(self, folder: Path, cores: int = 2, memory: str = "1g") -> None:
        self.folder = folder
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self._daemons: list[_Daemon] = []

    def start(self, timeout: float = 120) -> StandaloneCluster:
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        master = _Daemon("master", [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                    "--port", str(self.port), "--webui-port", str(free_port())], logs)
        self._daemons.append(master)
        master.wait_for("I have been elected leader", timeout)
        worker = _Daemon("worker", [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", self.url,
                                    "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                                    "--work-dir", str(self.folder / "work"), "--webui-port", str(free_port())], logs)
        self._daemons.append(worker)
        worker.wait_for("Successfully registered with master", timeout)
        return self

    def stop(self) -> None:
        for daemon in reversed(self._daemons):
            daemon.stop()
        self._daemons.clear()


class ConnectServer:
    """A Spark Connect server on ``local[2]``; ``url`` is its ``sc://`` address."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self._daemon: _Daemon | None = None

    def start(self, timeout: float = 120) -> ConnectServer:
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self._daemon = _Daemon(
            "connect server",
            [str(SPARK_SUBMIT), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
             "--name", "queueworker-tests", "--master", "local[2]",
             "--conf", f"spark.connect.grpc.binding.port={self.port}",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", "spark.ui.enabled=false",
             "--conf", f"spark.local.dir={self.folder / 'local'}"],
            logs, env={"PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)},
        )
        self._daemon.wait_for("Spark Connect server started", timeout)
        return self

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The server stopped with SIGSTOP (it accepts nothing and answers nothing) until the block ends.

        ``spark-submit`` execs the JVM, so the process started is the server itself.
        """
        assert self._daemon is not None
        self._daemon.proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self._daemon.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._daemon is not None:
            self._daemon.stop()
            self._daemon = None
