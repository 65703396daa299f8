"""The real Azure Storage emulator (Azurite's queue service from node_modules), started for the tests."""

from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path

from tests.support import poll

REPO = Path(__file__).resolve().parents[1]
EXECUTABLE = REPO / "node_modules" / ".bin" / "azurite-queue"
ACCOUNT = "devstoreaccount1"
#: The emulator's well-known key, published by Microsoft.
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_LISTENING = re.compile(r"listens on https?://[\d.]+:(\d+)")


class Azurite:
    """One ``azurite-queue`` process on a free loopback port (in memory, or on disk under ``location``)."""

    def __init__(self, location: Path | None = None, port: int = 0) -> None:
        self.location = location
        self.port = port
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"QueueEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};"
        )

    def start(self, timeout: float = 60) -> Azurite:
        if not EXECUTABLE.exists():
            raise RuntimeError(f"{EXECUTABLE} is missing: run 'npm ci' (the README's test command does)")
        storage = ["--location", str(self.location)] if self.location else ["--inMemoryPersistence"]
        self.proc = subprocess.Popen(
            [str(EXECUTABLE), *storage, "--skipApiVersionCheck", "--loose",
             "--queueHost", "127.0.0.1", "--queuePort", str(self.port)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

        def listening() -> int | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError("azurite exited:\n" + "".join(self.output))
            found = next((m for line in list(self.output) if (m := _LISTENING.search(line))), None)
            return int(found.group(1)) if found else None

        self.port = poll(listening, timeout, what="azurite to listen")
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
