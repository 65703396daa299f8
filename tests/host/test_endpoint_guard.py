"""Who may read what from a host's endpoints with no setting at all: real hosts, real HTTP on loopback.

With no token, an address beyond loopback (the default, 0.0.0.0) answers the probes, ``/metrics`` and the
console's shell, and refuses the data (``/leases``, the console's views) unless ``worker.httpOpenData`` opts in;
a Host header naming somewhere else is refused on every bind (DNS rebinding); every answer is marked not to be
sniffed or stored, and names no server version. The guard is the endpoints', the same on every backend: the
hosts run on the embedded queue.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDictProxy

from tests.support import apoll, captured_logs, free_port, running
from worker import QueueMessage, WorkerApp
from worker.runtime import guard
from worker.settings.config import HostConfig
from worker.settings.http_token import BearerToken

QUEUE = "guarded"
PROBES = ("/healthz", "/readyz", "/metrics", "/")
DATA = ("/leases", "/console/api/state", "/console/api/history")


def app() -> WorkerApp:
    worker = WorkerApp()

    @worker.queue_trigger(arg_name="msg", queue_name=QUEUE)
    def handle(msg: QueueMessage) -> None:
        pass

    return worker


def config(tmp_path: Path, **settings: object) -> HostConfig:
    return replace(
        HostConfig(base_dir=tmp_path, max_polling_interval=0.2, drain_timeout=1), http_port=free_port(), **settings
    )  # type: ignore[arg-type]


async def get(port: int, path: str, host: str | None = None) -> tuple[int, CIMultiDictProxy[str]]:
    """``path`` from the host on loopback, with ``host`` as the Host header when given: status and headers."""
    headers = {"Host": host} if host is not None else None
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}", headers=headers) as answer:
        await answer.read()
        return answer.status, answer.headers


async def statuses(port: int, paths: tuple[str, ...], host: str | None = None) -> list[int]:
    """The status of each of ``paths``, once the host's endpoints listen."""
    await apoll(lambda: listening(port), 15, what="the endpoints to listen")
    return [(await get(port, path, host))[0] for path in paths]


def _warned(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The start's warnings that the data answers without a token."""
    return [line for line in logs if line["log_level"] == "warning" and "without a token" in line["event"]]


async def listening(port: int) -> bool:
    try:
        await get(port, "/healthz")
    except aiohttp.ClientConnectionError:
        return False
    return True


async def test_with_no_token_beyond_loopback_only_the_probes_metrics_and_shell_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = config(tmp_path)  # httpHost 0.0.0.0, the default
    with captured_logs(monkeypatch, guard) as logs:
        async with running(app(), settings):
            assert await statuses(settings.http_port, PROBES) == [200] * 4
            assert await statuses(settings.http_port, DATA) == [403] * 3
    [listening] = [line for line in logs if line["event"] == "endpoints listening"]
    assert listening["data"] == "nobody" and not _warned(logs)


async def test_open_data_serves_the_data_without_a_token_and_warns_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = config(tmp_path, http_open_data=True)
    with captured_logs(monkeypatch, guard) as logs:
        async with running(app(), settings):
            assert await statuses(settings.http_port, DATA) == [200] * 3
    assert [warning["readers"] for warning in _warned(logs)] == ["anyone"]


async def test_on_loopback_with_no_token_every_path_answers_and_the_start_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = config(tmp_path, http_host="127.0.0.1")
    with captured_logs(monkeypatch, guard) as logs:
        async with running(app(), settings):
            assert await statuses(settings.http_port, PROBES + DATA) == [200] * 7
    assert [warning["readers"] for warning in _warned(logs)] == ["this machine"]


@pytest.mark.parametrize("bind", ["127.0.0.1", "0.0.0.0"])
async def test_a_host_header_naming_another_site_gets_no_answer_on_any_bind(tmp_path: Path, bind: str) -> None:
    settings = config(tmp_path, http_host=bind, http_open_data=True, http_allowed_hosts=("Worker.Example",))
    port = settings.http_port
    async with running(app(), settings):
        for foreign in ("attacker.example", f"attacker.example:{port}", "localhost.attacker.example"):
            assert await statuses(port, PROBES + DATA, host=foreign) == [421] * 7, foreign
        for own in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", f"10.1.2.3:{port}", "worker.example."):
            assert await statuses(port, DATA, host=own) == [200] * 3, own


async def test_every_answer_is_neither_sniffed_nor_stored_and_names_no_server_version(tmp_path: Path) -> None:
    settings = config(tmp_path, http_host="127.0.0.1")
    async with running(app(), settings):
        await apoll(lambda: listening(settings.http_port), 15, what="the endpoints to listen")
        for path in ("/readyz", "/leases", "/console/api/state", "/metrics", "/no-such-path"):
            _, headers = await get(settings.http_port, path)
            assert headers["X-Content-Type-Options"] == "nosniff", path
            assert headers["Cache-Control"] == "no-store", path
            assert headers["Server"] == "queueworker", path
        _, shell = await get(settings.http_port, "/")
        assert (shell["Cache-Control"], shell["Server"]) == ("no-cache", "queueworker")


@pytest.mark.parametrize(
    ("bind", "url"),
    [
        ("0.0.0.0", "http://localhost:8080/"),
        ("::", "http://localhost:8080/"),
        ("127.0.0.1", "http://127.0.0.1:8080/"),
        ("::1", "http://[::1]:8080/"),
        ("worker.example", "http://worker.example:8080/"),
    ],
)
def test_the_console_start_line_names_an_address_a_browser_opens(bind: str, url: str) -> None:
    assert guard.console_url(bind, 8080) == url


def test_the_console_start_line_says_how_to_get_in_for_each_kind_of_access() -> None:
    token = BearerToken("a-token-of-enough-length-1234", "WORKER_HTTP_TOKEN")
    assert "Token field" in guard.how_to_get_in(guard.Access(token, "0.0.0.0"))
    assert "loopback" in guard.how_to_get_in(guard.Access(None, "127.0.0.1"))
    assert "anyone" in guard.how_to_get_in(guard.Access(None, "0.0.0.0", open_data=True))
    beyond = guard.how_to_get_in(guard.Access(None, "0.0.0.0"))
    assert "WORKER_HTTP_TOKEN" in beyond and "--http-host 127.0.0.1" in beyond
