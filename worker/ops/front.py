"""The endpoints of several worker processes on one port: what the supervisor serves for ``--processes N``.

Each process listens on its own loopback port; the front asks them all.
``/metrics`` sums, ``/leases`` lists all, and probes pass only when every process's do.
The console merges them (:mod:`worker.runtime.console.merge`); poison actions go to the first that answers.
With a token set, the front asks for it and passes it on.
It is imported only for several processes: the web framework is most of a command's start.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import aiohttp
import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from worker.observability.redaction import redact, redact_value
from worker.runtime.connections import ConnectionLimits, Gate
from worker.runtime.console.merge import merge_history, merge_state
from worker.runtime.console.web import static_routes, who
from worker.runtime.endpoints import listen
from worker.runtime.guard import Access, allowed_hosts, announce, announce_console, application
from worker.settings.config import HostConfig
from worker.settings.http_token import BearerToken

log = structlog.get_logger("worker.ops.supervisor")

#: How long the front waits for a process's endpoint, in seconds.
PROCESS_TIMEOUT = 5.0
#: The address the endpoints listen on when ``worker.httpHost`` is not set (not shown among the settings then).
DEFAULT_HTTP_HOST = HostConfig().http_host


class Front:
    """The endpoints of the processes listening on ``ports`` (of ``processes_host``), served on ``host``:``port``."""

    def __init__(
        self,
        ports: Sequence[int],
        processes_host: str,
        host: str,
        port: int,
        token: BearerToken | None,
        open_data: bool,
        allowed: Sequence[str],
    ) -> None:
        """``token``, ``open_data`` (``worker.httpOpenData``) and ``allowed`` (``worker.httpAllowedHosts``) guard the
        front as they guard a process's own endpoints (:mod:`worker.runtime.guard`)."""
        self.ports = list(ports)
        self.processes_host = processes_host
        self.host = host
        self.port = port
        self.token = token
        self.access = Access(token, host, open_data, allowed_hosts(allowed))

    async def serve(self) -> web.AppRunner:
        gate = Gate(ConnectionLimits())
        app = application(self.access, gate)
        app.add_routes(
            [
                web.get("/healthz", self._healthz),
                web.get("/readyz", self._readyz),
                web.get("/metrics", self._metrics),
                web.get("/leases", self._leases),
                *static_routes(),
                web.get("/console/api/state", self._console_state),
                web.get("/console/api/history", self._console_history),
                web.post("/console/api/poison/{function}/{action}", self._console_action),
            ]
        )
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await listen(runner, self.host, self.port, gate)
        announce(self.access, port=self.port, processes=len(self.ports))
        announce_console(self.access, self.port)
        return runner

    async def _ask(self, path: str) -> list[tuple[int, int, str]]:
        """``path`` of every process: (its index, status, body); status 0 when it does not answer."""

        async def one(session: aiohttp.ClientSession, index: int, port: int) -> tuple[int, int, str]:
            try:
                async with session.get(f"http://{self.processes_host}:{port}{path}") as response:
                    return index, response.status, await response.text()
            except (aiohttp.ClientError, TimeoutError) as exc:
                return index, 0, f"{type(exc).__name__}: {exc}"

        timeout = aiohttp.ClientTimeout(total=PROCESS_TIMEOUT)
        headers = self.token.header() if self.token is not None else None  # the children ask for it too
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            return list(await asyncio.gather(*(one(session, index, port) for index, port in enumerate(self.ports))))

    async def _healthz(self, _: web.Request) -> web.Response:
        return await self._all_fine("/healthz")

    async def _readyz(self, _: web.Request) -> web.Response:
        return await self._all_fine("/readyz")

    async def _all_fine(self, path: str) -> web.Response:
        answers = await self._ask(path)
        problems = [
            f"process {index}: {status or 'no answer'} {body}".strip() for index, status, body in answers if status != 200
        ]
        return web.json_response(
            {"ok": not problems, "processes": len(self.ports), "problems": [redact(problem) for problem in problems]},
            status=200 if not problems else 503,
        )

    async def _leases(self, _: web.Request) -> web.Response:
        leases = []
        for index, status, body in await self._ask("/leases"):
            if status == 200:
                leases += [{**lease, "process": index} for lease in json.loads(body)]
        return web.json_response(leases)

    async def _console_state(self, _: web.Request) -> web.Response:
        answers = await self._ask("/console/api/state")
        state = merge_state([(index, json.loads(body)) for index, status, body in answers if status == 200])
        if "settings" in state["facts"]:
            state["facts"]["settings"] = self._settings(state["facts"]["settings"])
        return web.json_response(redact_value(state))

    def _settings(self, shown: dict[str, str]) -> dict[str, str]:
        """The settings a process shows, with the front's own where the supervisor gave the process others.

        Why: each process listens on a loopback port of its own and runs as one process; the console is reached
        here, on the port and address configured, for all of them, and that is what it must show.
        """
        settings = {
            key: value
            for key, value in shown.items()
            if key not in ("worker.httpPort", "worker.httpHost", "worker.processes")
        }
        settings["worker.httpPort"] = str(self.port)
        if self.host != DEFAULT_HTTP_HOST:
            settings["worker.httpHost"] = self.host
        settings["worker.processes"] = str(len(self.ports))
        return dict(sorted(settings.items()))

    async def _console_history(self, _: web.Request) -> web.Response:
        answers = await self._ask("/console/api/history")
        return web.json_response(merge_history([json.loads(body) for _, status, body in answers if status == 200]))

    async def _console_action(self, request: web.Request) -> web.Response:
        """Hand a poison action to the first process that answers (the token, checked here, goes along as the
        supervisor's own; who asked goes in X-Forwarded-For), and log who asked."""
        body = await request.read()
        headers = {"Content-Type": "application/json", "X-Forwarded-For": str(request.remote)}
        if self.token is not None:
            headers |= self.token.header()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=PROCESS_TIMEOUT)  # requeue all may take a while
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            for index, port in enumerate(self.ports):
                try:
                    async with session.post(f"http://{self.processes_host}:{port}{request.path}", data=body) as answer:
                        text = await answer.text()
                except (aiohttp.ClientError, TimeoutError):
                    continue
                log.info(
                    "poison action from the console handed to a worker process",
                    process=index,
                    path=request.path,
                    status=answer.status,
                    **who(request),
                )
                return web.Response(body=text, status=answer.status, content_type="application/json")
        return web.json_response({"error": "no worker process answers"}, status=503)

    async def _metrics(self, _: web.Request) -> web.Response:
        texts = [body for _, status, body in await self._ask("/metrics") if status == 200]
        return web.Response(body=redact(sum_metrics(texts)).encode(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def sum_metrics(texts: Sequence[str]) -> str:
    """Prometheus texts of several processes as one: each series (name and labels) summed over them.

    Counters, gauges and histogram buckets all add up across processes; the
    HELP and TYPE lines are the first process's.
    """
    families: dict[str, tuple[str, str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            _, _, series = families.setdefault(family.name, (family.type, family.documentation, {}))
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                series[key] = series.get(key, 0.0) + sample.value
    lines = []
    for name, (kind, documentation, series) in families.items():
        exposed = f"{name}_total" if kind == "counter" else name
        lines.append(f"# HELP {exposed} {documentation}")
        lines.append(f"# TYPE {exposed} {kind}")
        for (sample_name, labels), value in series.items():
            rendered = ",".join(f'{key}="{_escape(val)}"' for key, val in labels)
            lines.append(f"{sample_name}{{{rendered}}} {value!r}" if rendered else f"{sample_name} {value!r}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
