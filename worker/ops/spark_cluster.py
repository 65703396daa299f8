"""Spark servers on one machine, from the installed pyspark: a standalone master and worker, or Spark Connect.

``worker spark`` and the test fixtures use it to try a cluster on one machine.
pip's pyspark lacks ``sbin/start-*.sh``, so servers start here as those scripts would, detached.
Each logs under the state folder, is ready when its log says so, and is recorded in ``servers.json``.
A recorded pid counts only while its command line names the server's class (:func:`running`).
``SPARK_LOCAL_IP`` binds all to the given host (loopback by default), web UIs included.
The servers' Python workers use this interpreter, so they import what the worker imports.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from worker.backends.embedded.files import private_folder

#: What each kind of server logs once it serves, and the main class its command line names.
READY = {
    "master": "I have been elected leader",
    "worker": "Successfully registered with master",
    "connect": "Spark Connect server started",
}
MAIN_CLASS = {
    "master": "org.apache.spark.deploy.master.Master",
    "worker": "org.apache.spark.deploy.worker.Worker",
    "connect": "org.apache.spark.sql.connect.service.SparkConnectServer",
}
#: The order servers stop in: what uses another first.
STOP_ORDER = ("connect", "worker", "master")
#: Lines of a server's log shown when it fails to start.
LOG_TAIL_LINES = 40
POLL_SECONDS = 0.2
RECORD = "servers.json"


class SparkServerError(Exception):
    """A server cannot be started: pyspark is missing, a port is taken, or it exited or never became ready."""


@dataclass(frozen=True)
class Server:
    """One server started here: its kind (``master``, ``worker``, ``connect``), pid, what it serves and its log."""

    kind: str
    pid: int
    url: str
    log: str
    web_ui: str | None = None


def spark_home() -> Path:
    """The installed pyspark's folder, which holds ``bin/spark-class``, ``bin/spark-submit`` and the jars."""
    try:
        import pyspark
    except ImportError:
        raise SparkServerError(
            "pyspark is not installed: pip install 'queueworker[spark]' (and [connect] for Spark Connect)"
        ) from None
    return Path(pyspark.__file__).resolve().parent


def claim_port(host: str, port: int) -> int:
    """``port`` if nothing listens on it at ``host`` now, or a free one for 0; a taken port is refused in one line.

    Checked before a JVM is started: the JVM's own bind failure comes seconds later, deep in its log.
    """
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            # As the JVM binds: a port whose last server just stopped (its connections in TIME_WAIT) can be had
            # again at once; one something listens on cannot.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
            return int(probe.getsockname()[1])
    except OSError as exc:
        what = f"port {port}" if port else "a port"
        raise SparkServerError(f"cannot listen on {what} at {host}: {exc.strerror or exc}") from None


def start_cluster(
    state: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    cores: int | None = None,
    memory: str | None = None,
    timeout: float = 120.0,
) -> list[Server]:
    """A master on ``host:port`` (0: a free port) and one worker registered with it; cores and memory default to
    Spark's (every core, the machine's memory less 1 GiB)."""
    _refuse_running(state, ("master", "worker"))
    home = spark_home()
    port = claim_port(host, port)
    url = f"spark://{_url_host(host)}:{port}"
    master_ui = claim_port(host, 0)
    master = _start(
        state,
        "master",
        url,
        [
            str(home / "bin" / "spark-class"),
            MAIN_CLASS["master"],
            "--host",
            host,
            "--port",
            str(port),
            "--webui-port",
            str(master_ui),
        ],
        host,
        timeout,
        web_ui=f"http://{_url_host(host)}:{master_ui}",
    )
    worker_command = [
        str(home / "bin" / "spark-class"),
        MAIN_CLASS["worker"],
        url,
        "--host",
        host,
        "--work-dir",
        str(state / "work"),
        "--webui-port",
        str(claim_port(host, 0)),
    ]
    if cores is not None:
        worker_command += ["--cores", str(cores)]
    if memory is not None:
        worker_command += ["--memory", memory]
    try:
        worker = _start(state, "worker", url, worker_command, host, timeout)
    except SparkServerError:
        stop(state, kinds=("master",))
        raise
    return [master, worker]


def start_connect(
    state: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    master: str = "local[*]",
    name: str = "queueworker",
    conf: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> Server:
    """A Spark Connect server on ``host:port`` (0: a free port) running its jobs on ``master``.

    Its web UI listens on a free port of ``host`` too (unless ``conf`` turns the UI off or names its port), and is
    recorded: a worker given it (``spark.webUi``) cancels there the jobs an interrupt cannot reach
    (:mod:`worker.middleware.connect_jobs`).
    """
    _refuse_running(state, ("connect",))
    home = spark_home()
    port = claim_port(host, port)
    settings = {
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.local.dir": str(state / "connect-local"),
        **(conf or {}),
    }
    web_ui = None
    if settings.get("spark.ui.enabled", "true").lower() != "false":
        settings.setdefault("spark.ui.port", str(claim_port(host, 0)))
        web_ui = f"http://{_url_host(host)}:{settings['spark.ui.port']}"
    command = [str(home / "bin" / "spark-submit"), "--class", MAIN_CLASS["connect"], "--name", name, "--master", master]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return _start(state, "connect", f"sc://{_url_host(host)}:{port}", command, host, timeout, env=env, web_ui=web_ui)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _start(
    state: Path,
    kind: str,
    url: str,
    command: list[str],
    host: str,
    timeout: float,
    *,
    env: dict[str, str] | None = None,
    web_ui: str | None = None,
) -> Server:
    """Start one server detached, record it, and return once its log says it is ready.

    On failure (it exited, or the deadline passed) it is stopped and the error carries its log's last lines.
    """
    logs = state / "logs"
    private_folder(logs)
    log_path = logs / f"{kind}.log"
    environment = {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": host,
        "SPARK_LOG_DIR": str(logs),
        "SPARK_LOCAL_DIRS": str(state / f"{kind}-local"),
        "PYSPARK_PYTHON": sys.executable,
        **(env or {}),
    }
    with log_path.open("ab") as log:
        offset = log.tell()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=state,
            start_new_session=True,
        )
    server = Server(kind, process.pid, url, str(log_path), web_ui)
    _record(state, [*_recorded(state), server])
    deadline = time.monotonic() + timeout
    while True:
        text = _read_from(log_path, offset)
        if READY[kind] in text:
            return server
        if process.poll() is not None or time.monotonic() > deadline:
            why = (
                f"exited with code {process.returncode}"
                if process.returncode is not None
                else f"did not log {READY[kind]!r} within {timeout:g}s"
            )
            stop(state, kinds=(kind,))
            tail = "".join(text.splitlines(keepends=True)[-LOG_TAIL_LINES:])
            raise SparkServerError(f"the Spark {kind} {why}; the end of {log_path}:\n{tail}")
        time.sleep(POLL_SECONDS)


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as file:
        file.seek(offset)
        return file.read().decode("utf-8", errors="replace")


def _refuse_running(state: Path, kinds: tuple[str, ...]) -> None:
    for server in running(state):
        if server.kind in kinds:
            raise SparkServerError(
                f"a Spark {server.kind} started from {state} already runs (pid {server.pid}, "
                f"{server.url}); worker spark stop stops it"
            )


def _recorded(state: Path) -> list[Server]:
    try:
        return [Server(**item) for item in json.loads((state / RECORD).read_text(encoding="utf-8"))]
    except FileNotFoundError:
        return []


def _record(state: Path, servers: list[Server]) -> None:
    private_folder(state)
    (state / RECORD).write_text(json.dumps([asdict(s) for s in servers], indent=2), encoding="utf-8")


def running(state: Path) -> list[Server]:
    """The servers recorded in ``state`` that still run."""
    return [server for server in _recorded(state) if _alive(server)]


def _alive(server: Server) -> bool:
    """Whether the server's pid still runs and, where ``/proc`` shows command lines, still names its main class."""
    try:  # a child of this process (a test's fixture) that has exited stays a zombie until it is reaped
        if os.waitpid(server.pid, os.WNOHANG)[0] == server.pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(server.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: the pid was reused
        return False
    if not Path("/proc/self/cmdline").exists():  # no /proc (macOS): the pid is all there is to go by
        return True
    try:
        command = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    if not _threads_left(server.pid):
        return False
    # A process on its way out releases its memory, so its command line reads empty, before its last thread closes
    # its files and sockets (a JVM with a hundred threads takes a while): until then it still holds its port.
    return not command or MAIN_CLASS[server.kind] in command


def _threads_left(pid: int) -> bool:
    """Whether a thread of ``pid`` has yet to finish exiting.

    The leader thread turns zombie as soon as it is done, while its siblings may still be closing the files they
    share; a thread counts as done once it is a zombie or has left ``/proc/<pid>/task``.
    """
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for thread in threads:
        try:
            status = Path(f"/proc/{pid}/task/{thread}/stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if status.rpartition(")")[2].split()[:1] != ["Z"]:
            return True
    return False


def stop(state: Path, *, kinds: tuple[str, ...] = STOP_ORDER, timeout: float = 20.0) -> list[Server]:
    """Stop the running servers of ``kinds`` (SIGTERM, then SIGKILL to its process group after ``timeout``).

    Returns the servers stopped; the record keeps the others.
    """
    stopped = []
    for kind in STOP_ORDER:
        for server in running(state):
            if server.kind == kind and kind in kinds:
                _terminate(server, timeout)
                stopped.append(server)
    if (state / RECORD).exists():  # a stop with nothing ever started leaves no folder behind
        _record(state, [s for s in _recorded(state) if s.kind not in kinds and _alive(s)])
    return stopped


def _terminate(server: Server, timeout: float) -> None:
    """SIGTERM (the JVM's shutdown hooks stop its executors or Python workers), then SIGKILL to its whole group."""
    os.kill(server.pid, signal.SIGTERM)
    if _gone(server, timeout):
        return
    try:
        os.killpg(server.pid, signal.SIGKILL)  # started in a session of its own: the group is its and its children's
    except ProcessLookupError:
        return
    _gone(server, timeout)


def _gone(server: Server, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(server):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_SECONDS / 2)
    return True
