"""The Spark servers ``worker spark`` starts: the stop returns only once the server's port is free, and a server
that never logs the line its start awaits is stopped and named."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import poll
from worker.ops import spark_cluster

#: A stand-in for a JVM on its way out: it names the Connect server's class, listens, and ends its leader thread
#: (which turns zombie with an empty command line) while another thread keeps the socket open.
LEADER_GONE_FIRST = """
import ctypes, socket, threading, time
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
threading.Thread(target=time.sleep, args=(600,)).start()
ctypes.CDLL(None).pthread_exit(None)
"""


def refuses(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


@pytest.mark.subprocess
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads threads from /proc")
def test_a_server_whose_leader_thread_exited_first_counts_as_running_until_its_port_is_closed(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", LEADER_GONE_FIRST, spark_cluster.MAIN_CLASS["connect"]],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        server = spark_cluster.Server("connect", process.pid, f"sc://127.0.0.1:{port}", str(tmp_path / "log"), None)
        (tmp_path / spark_cluster.RECORD).write_text(json.dumps([server.__dict__]), encoding="utf-8")

        poll(lambda: Path(f"/proc/{process.pid}/cmdline").read_bytes() == b"", 10, what="the leader thread's end")
        assert not refuses(port)  # the leader is done, and the port still answers
        assert spark_cluster.running(tmp_path) == [server]

        assert spark_cluster.stop(tmp_path, timeout=10) == [server]
        assert refuses(port)
        assert spark_cluster.running(tmp_path) == []
    finally:
        process.kill()
        process.wait(timeout=10)


@pytest.mark.subprocess
def test_a_server_that_never_logs_the_line_it_is_awaited_by_is_stopped_and_named_in_one_line(tmp_path: Path) -> None:
    """Readiness is read from Spark's own log lines, which are not its API: a Spark that words one otherwise is
    refused at the start's timeout, naming the line awaited, with its log's end, and is not left running."""
    master = spark_cluster.MAIN_CLASS["master"]
    command = [sys.executable, "-c", "import sys, time; print('serving', flush=True); time.sleep(600)", master]
    with pytest.raises(spark_cluster.SparkServerError) as refused:
        spark_cluster._start(tmp_path, "master", "spark://127.0.0.1:1", command, "127.0.0.1", 1.0)
    first, _, tail = str(refused.value).partition("\n")
    assert first.startswith(f"the Spark master did not log {spark_cluster.READY['master']!r} within 1s; the end of ")
    assert tail == "serving\n"
    assert spark_cluster.running(tmp_path) == []
