"""A Spark standalone cluster for the tests: one master and one worker from the installed pyspark, on loopback.

Both are real JVMs started with ``bin/spark-class`` on free ports, with the
worker's ``--work-dir`` under the test run's temporary folder; each is ready
when it logs so (the master "I have been elected leader", the worker
"Successfully registered with master").
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pyspark

from tests.support import free_port, poll

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"


class _Daemon:
    """One spark-class process whose output is kept for readiness checks and failure messages."""

    def __init__(self, name: str, args: list[str], log_dir: Path) -> None:
        self.name = name
        self.output: list[str] = []
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOG_DIR": str(log_dir), "SPARK_NO_DAEMONIZE": "1"}
        self.proc = subprocess.Popen([str(SPARK_CLASS), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)
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
        master = _Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                    "--port", str(self.port), "--webui-port", str(free_port())], logs)
        self._daemons.append(master)
        master.wait_for("I have been elected leader", timeout)
        worker = _Daemon("worker", ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                                    "--cores", str(self.cores), "--memory", self.memory,
                                    "--work-dir", str(self.folder / "work"), "--webui-port", str(free_port())], logs)
        self._daemons.append(worker)
        worker.wait_for("Successfully registered with master", timeout)
        return self

    def stop(self) -> None:
        for daemon in reversed(self._daemons):
            daemon.stop()
        self._daemons.clear()
