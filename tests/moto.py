"""moto's server (its SQS over real HTTP, as botocore speaks it), started for the tests like Azurite."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.support import free_port, poll

#: What botocore signs with against moto, which takes any key: the provider chain's environment variables, set for
#: the test process (and the workers it starts) unless the run has some of its own.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
REGION = "us-east-1"


class Moto:
    """One ``moto.server`` process on a free loopback port; its state is in memory and goes with it."""

    def __init__(self) -> None:
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connection(self, long_poll: int = 2, **options: str) -> str:
        """An ``sqs://`` connection string to this server. Its long poll is 2 s rather than SQS's 20 s: a stopping
        worker waits out the poll under way, and two seconds show the same as twenty."""
        extra = "".join(f"&{k}={v}" for k, v in options.items())
        return f"sqs://?region={REGION}&endpoint={self.endpoint}&longPoll={long_poll}{extra}"

    def start(self, timeout: float = 60) -> Moto:
        for name, value in CREDENTIALS.items():
            os.environ.setdefault(name, value)
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def listening() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"moto.server exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                return False
            return True

        poll(listening, timeout, what="moto to listen")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
