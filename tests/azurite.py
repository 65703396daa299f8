"""The real Azure Storage emulator (Azurite's queue and blob services from node_modules), started for the tests."""

from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path

from tests.support import poll

REPO = Path(__file__).resolve().parents[1]
EXECUTABLE = REPO / "node_modules" / ".bin" / "azurite"
ACCOUNT = "devstoreaccount1"
#: The emulator's well-known key, published by Microsoft.
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_LISTENING = re.compile(r"Azurite (Blob|Queue) service is successfully listening at https?://[\d.]+:(\d+)")


class Azurite:
    """One ``azurite`` process serving queues and blobs on free loopback ports (in memory, or on disk under ``location``).

    ``port`` is the queue service's, ``blob_port`` the blob service's; a restart keeps both.
    """

    def __init__(
        self, location: Path | None = None, port: int = 0, blob_port: int = 0, tls: tuple[Path, Path] | None = None
    ) -> None:
        """``tls`` (certificate, key) serves HTTPS and accepts OAuth bearer tokens as well as account keys."""
        self.location = location
        self.port = port
        self.blob_port = blob_port
        self.tls = tls
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def queue_endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol={self.scheme};AccountName={ACCOUNT};AccountKey={KEY};"
            f"QueueEndpoint={self.queue_endpoint};"
            f"BlobEndpoint={self.scheme}://127.0.0.1:{self.blob_port}/{ACCOUNT};"
        )

    def start(self, timeout: float = 60) -> Azurite:
        if not EXECUTABLE.exists():
            raise RuntimeError(f"{EXECUTABLE} is missing: run 'npm ci' (the README's test command does)")
        storage = ["--location", str(self.location)] if self.location else ["--inMemoryPersistence"]
        if self.tls:
            storage += ["--cert", str(self.tls[0]), "--key", str(self.tls[1]), "--oauth", "basic"]
        self.proc = subprocess.Popen(
            # --disableTelemetry: Azurite otherwise reports every request to an Application Insights endpoint, which
            # costs it about a quarter of its CPU per request and 2-3 % of a core while idle, retrying an endpoint a
            # test machine may not reach. --silent: no access log, which nothing reads (only the start's lines are).
            [
                str(EXECUTABLE),
                *storage,
                "--skipApiVersionCheck",
                "--loose",
                "--disableTelemetry",
                "--silent",
                "--queueHost",
                "127.0.0.1",
                "--queuePort",
                str(self.port),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.blob_port),
                # The table service cannot be left out of this executable; it gets a free port and is not used.
                "--tableHost",
                "127.0.0.1",
                "--tablePort",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

        def listening() -> dict[str, int] | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError("azurite exited:\n" + "".join(self.output))
            ports = {m.group(1): int(m.group(2)) for line in list(self.output) if (m := _LISTENING.search(line))}
            return ports if len(ports) == 2 else None

        ports = poll(listening, timeout, what="azurite to listen")
        self.port, self.blob_port = ports["Queue"], ports["Blob"]
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)  # it may wait on idle keep-alive connections; nothing is lost in memory
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.output = []
