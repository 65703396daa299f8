"""What the console's tests share: a worker process of the console app, messages sent to it, its console's API."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.host.processes import WorkerProcess
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode

APP = "tests.apps.console_app:app"


@dataclass
class ConsoleHost:
    """A running ``worker run`` of the console app: its port, its folder and its token (None: none set)."""

    worker: WorkerProcess
    port: int
    folder: Path
    token: str | None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def send(self, queue: str, body: str, *, delay: float = 0) -> str:
        """Put ``body`` on ``queue`` of the host's embedded queue (hidden for ``delay`` seconds); its message id."""

        async def put() -> str:
            backend = open_backend(None, self.folder)
            try:
                await backend.create_queue(queue)
                return (await backend.put(queue, encode(body, "base64"), visibility_timeout=delay)).id
            finally:
                await backend.close()

        return asyncio.run(put())

    def handled(self) -> list[str]:
        """The lines the app wrote for each message it handled: ``function body``."""
        path = self.folder / "handled.txt"
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def request(
        self, path: str, *, method: str = "GET", token: str | None = None, body: dict[str, Any] | None = None
    ) -> tuple[int, Any]:
        """``path`` of the console with ``token`` (if any): the status and the decoded JSON answer."""
        data = json.dumps(body).encode() if body is not None else (b"{}" if method == "POST" else None)
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
        )
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, decoded(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, decoded(exc.read())

    def state(self) -> dict[str, Any]:
        """The console's state, asked with the host's token."""
        status, state = self.request("/console/api/state", token=self.token)
        assert status == 200, state
        return state


def decoded(body: bytes) -> Any:
    """A JSON answer decoded; aiohttp's own plain-text answers (405, say) as text."""
    try:
        return json.loads(body or b"null")
    except ValueError:
        return body.decode("utf-8", errors="replace")
