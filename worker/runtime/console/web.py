"""The console's routes: the shell and its static files (open: no data), the JSON views and the poison actions.

The views and actions are behind the token, as ``/leases`` is.
An action is a POST with the token in its ``Authorization`` header; no CORS is answered.
So a page of another site can neither send it nor read the answer.
With no token set, actions are refused (403). Bulk actions answer 202 (:mod:`worker.runtime.console.actions`).
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import structlog
from aiohttp import web

from worker.observability.redaction import redact, redact_value
from worker.runtime.console.actions import BULK
from worker.runtime.console.poison import ActionRefused
from worker.runtime.console.state import Console

log = structlog.get_logger("worker.runtime.console")

#: The shell and its static files, by path: served to anyone, because they hold no data.
STATIC = {
    "/": ("index.html", "text/html"),
    "/console/console.js": ("console.js", "text/javascript"),
    "/console/console.css": ("console.css", "text/css"),
}
#: The actions, by the last part of their path.
ACTIONS = ("requeue", "requeue-all", "purge")
#: What the page is allowed to do: its own script and style, nothing from elsewhere (there is no CDN to reach).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def static_routes() -> list[web.RouteDef]:
    """``/`` and the script and style it loads, read once from the package."""
    folder = files("worker.runtime.console") / "static"
    routes = []
    for path, (name, kind) in STATIC.items():
        body = (folder / name).read_bytes()

        async def serve(_: web.Request, body: bytes = body, kind: str = kind) -> web.Response:
            return web.Response(
                body=body,
                content_type=kind,
                charset="utf-8",
                headers={"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
            )

        routes.append(web.get(path, serve))
    return routes


def routes(console: Console) -> list[web.RouteDef]:
    """Every console route of one host."""

    async def state(_: web.Request) -> web.Response:
        # Failures are what handlers raised, and the start-up settings what the operator wrote: either may hold a
        # secret (a SAS URL, a Spark master's token), so the whole view passes the log's redaction.
        return web.json_response(redact_value(await console.state()))

    async def history(_: web.Request) -> web.Response:
        return web.json_response(console.history.series())

    async def act(request: web.Request) -> web.Response:
        function, action = request.match_info["function"], request.match_info["action"]
        if not console.actions:
            return refused(403, "poison actions need the endpoint token: set WORKER_HTTP_TOKEN or worker.httpTokenFile")
        poison = console.poison.get(function)
        if poison is None or action not in ACTIONS:
            return refused(404, f"no function {function!r} or no action {action!r} here")
        try:
            if action in BULK:  # may take minutes: started here, watched in the state
                running = console.bulk.start(poison, action, who(request))
                return web.json_response(running.view(), status=202)
            message_id = (await body_of(request)).get("messageId")
            if not isinstance(message_id, str):
                return refused(400, "requeue needs the messageId of one message (requeue-all moves them all)")
            console.bulk.check_idle(function)  # a bulk action would be taking the same messages
            try:
                moved = await poison.requeue(message_id)
            finally:
                await console.refresh(0)  # the page's next view shows what the action did
        except ActionRefused as exc:
            return refused(exc.status, str(exc))
        log.warning(
            "poison action from the console",
            action=action,
            function=function,
            queue=poison.queue,
            messages=moved,
            message_id=message_id,
            **who(request),
        )
        return web.json_response({"action": action, "function": function, "messages": moved})

    return [
        *static_routes(),
        web.get("/console/api/state", state),
        web.get("/console/api/history", history),
        web.post("/console/api/poison/{function}/{action}", act),
    ]


def who(request: web.Request) -> dict[str, Any]:
    """Who asked, for the log: the peer's address, and what a proxy in front (the supervisor) says it forwarded."""
    found: dict[str, Any] = {"peer": request.remote}
    if forwarded := request.headers.get("X-Forwarded-For"):
        found["forwarded_for"] = forwarded
    return found


async def body_of(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; an empty one for no body or anything else."""
    try:
        found = json.loads(await request.text() or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def refused(status: int, reason: str) -> web.Response:
    return web.json_response({"error": redact(reason)}, status=status)
