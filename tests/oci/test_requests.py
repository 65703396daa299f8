"""Every request the OCI backend sends is one the SDK defines: its path, query parameters and body fields.

The test server is written from the same API reference as the backend, so a field both got wrong would pass there
and fail on the service. Here the backend's own traffic is recorded at the SDK's HTTP adapter (what really leaves
the process, through the real server) and held to the SDK's definitions, which Oracle generates from the API
specification: each operation's method, path template and query parameters in ``oci/queue/queue_client.py`` and
``queue_admin_client.py``, and each body's fields against its model's ``attribute_map`` (the JSON names) and
``swagger_types`` (their types).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import oci
import pytest
from oci._vendor.requests.adapters import HTTPAdapter

from tests.conftest import oci_connection
from tests.oci.fixture import OciTestServer
from worker.backends.registry import open_backend

API_PREFIX = "/20210201"
#: Swagger's scalar types and the JSON values that may carry them.
SCALARS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "datetime": (str,),
    "object": (object,),
}


@dataclass(frozen=True)
class Operation:
    """One SDK operation: ``method`` on ``path`` (a template), its query parameters' types, and its body's model."""

    name: str
    method: str
    path: str
    query: dict[str, str]
    body: str | None

    def matches(self, method: str, path: str) -> bool:
        return method == self.method and re.fullmatch(re.sub(r"\{\w+\}", "[^/]+", self.path), path) is not None


def sdk_operations(module: Any) -> list[Operation]:
    """The operations of an SDK client module, read from its source (what each generated method sends)."""
    operations = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        docs = ast.get_docstring(node) or ""
        types = dict((name, kind) for kind, name in re.findall(r":param ([\w.]+) (\w+):", docs))
        values: dict[str, Any] = {}
        body = None
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign) and isinstance(sub.targets[0], ast.Name):
                values.setdefault(sub.targets[0].id, sub.value)
            if isinstance(sub, ast.keyword) and sub.arg == "body" and isinstance(sub.value, ast.Name):
                body = types[sub.value.id].removeprefix("oci.queue.models.")
        if "resource_path" not in values:
            continue
        query: dict[str, str] = {}
        if isinstance(values.get("query_params"), ast.Dict):
            for key, value in zip(values["query_params"].keys, values["query_params"].values, strict=True):
                argument = ast.literal_eval(value.args[0]) if isinstance(value, ast.Call) else None
                query[ast.literal_eval(key)] = types.get(argument, "str")
        operations.append(
            Operation(node.name, ast.literal_eval(values["method"]), ast.literal_eval(values["resource_path"]), query, body)
        )
    return operations


OPERATIONS = sdk_operations(oci.queue.queue_client) + sdk_operations(oci.queue.queue_admin_client)


def check_value(value: Any, kind: str, where: str) -> None:
    """``value`` (decoded JSON) is of the swagger type ``kind``: a scalar, ``list[...]``, ``dict(str, ...)`` or a
    model of ``oci.queue.models`` whose JSON names are its ``attribute_map``'s values. AssertionError says where not."""
    if value is None:
        return
    if kind.startswith("list[") and kind.endswith("]"):
        assert isinstance(value, list), f"{where}: a list, not {value!r}"
        for i, item in enumerate(value):
            check_value(item, kind[5:-1], f"{where}[{i}]")
    elif kind.startswith("dict(") and kind.endswith(")"):
        assert isinstance(value, dict), f"{where}: an object, not {value!r}"
        item_kind = kind[5:-1].split(",", 1)[1].strip()
        for key, item in value.items():
            check_value(item, item_kind, f"{where}.{key}")
    elif kind in SCALARS:
        assert isinstance(value, SCALARS[kind]) and not (kind != "bool" and isinstance(value, bool)), (
            f"{where}: {kind}, not {value!r}"
        )
    else:
        model = getattr(oci.queue.models, kind)()
        assert isinstance(value, dict), f"{where}: a {kind} object, not {value!r}"
        attributes = {json_name: attribute for attribute, json_name in model.attribute_map.items()}
        unknown = sorted(set(value) - set(attributes))
        assert not unknown, f"{where}: {kind} has no field {', '.join(unknown)} (it has {', '.join(sorted(attributes))})"
        for json_name, item in value.items():
            check_value(item, model.swagger_types[attributes[json_name]], f"{where}.{json_name}")


def check_request(method: str, url: str, body: bytes | str | None) -> Operation:
    """The SDK operation ``method url`` is, once its path, query and body are what that operation sends."""
    parts = urlsplit(url)
    assert parts.path.startswith(API_PREFIX + "/"), f"{method} {parts.path}: not under {API_PREFIX}"
    path = parts.path[len(API_PREFIX) :]
    [operation] = [op for op in OPERATIONS if op.matches(method, path)] or [None]
    assert operation is not None, f"{method} {path}: no operation of the SDK has this method and path"
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        assert name in operation.query, f"{operation.name}: no query parameter {name} ({', '.join(operation.query)})"
        if operation.query[name] == "int":
            assert re.fullmatch(r"-?\d+", value), f"{operation.name}: {name} is an int, not {value!r}"
    if operation.body is None:
        assert not body, f"{operation.name} takes no body"
    else:
        check_value(json.loads(body or b"null"), operation.body, operation.body)
    return operation


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, Any]]]:
    """Every request the SDK sends in this test (method, URL, body), taken at its HTTP adapter and sent on."""
    requests: list[tuple[str, str, Any]] = []
    send = HTTPAdapter.send

    def recording(self: HTTPAdapter, request: Any, *args: Any, **kwargs: Any) -> Any:
        requests.append((request.method, request.url, request.body))
        return send(self, request, *args, **kwargs)

    monkeypatch.setattr(HTTPAdapter, "send", recording)
    yield requests


async def test_every_request_the_backend_sends_is_defined_by_the_sdk(
    oci_server: OciTestServer, tmp_path: Path, queue_name: str, sent: list[tuple[str, str, Any]]
) -> None:
    backend = open_backend(oci_connection(oci_server), tmp_path)
    try:
        await backend.create_queue(queue_name)
        by_backend = len(sent)
        oci_server.set_delivery_limit(queue_name, 5)  # as an operator would: not the backend's traffic
        del sent[by_backend:]
        await backend.put(queue_name, "plain")
        await backend.put(queue_name, "on a channel", channel="eu")
        [on_channel] = await backend.receive(queue_name, 20, 30, channel="eu")
        [plain] = await backend.receive(queue_name, 20, 30, wait=1)
        await backend.update(queue_name, plain.id, plain.pop_receipt or "", 60)
        for message in (plain, on_channel):
            await backend.delete(queue_name, message.id, message.pop_receipt or "")
        assert await backend.approximate_count(queue_name) == 0
        assert await backend.dead_letter_limit(queue_name) == 5
        assert await backend.dead_letter_count(queue_name) == 0
        await backend.purge_dead_letters(queue_name)
        assert queue_name in await backend.list_queues()
        await backend.delete_queue(queue_name)
    finally:
        await backend.close()
    names = {check_request(*request).name for request in sent}
    assert names >= {
        "create_queue",
        "list_queues",
        "get_work_request",
        "get_queue",
        "put_messages",
        "get_messages",
        "update_message",
        "delete_message",
        "get_stats",
        "purge_queue",
        "delete_queue",
    }, names


@pytest.mark.parametrize(
    ("method", "url", "body", "wrong"),
    [
        (
            "POST",
            f"http://h{API_PREFIX}/queues/q/messages",
            {"messages": [{"content": "x", "channel": "eu"}]},
            "PutMessagesDetails.messages[0]: PutMessagesDetailsEntry has no field channel",
        ),
        ("POST", f"http://h{API_PREFIX}/queues/q/messages", {"messages": [{"content": 1}]}, "content: str, not 1"),
        ("PUT", f"http://h{API_PREFIX}/queues/q/messages/r", {"visibility_in_seconds": 5}, "no field visibility_in_seconds"),
        ("GET", f"http://h{API_PREFIX}/queues/q/messages?visibility=5", None, "no query parameter visibility"),
        ("GET", f"http://h{API_PREFIX}/queues/q/messages?limit=all", None, "limit is an int"),
        ("GET", f"http://h{API_PREFIX}/queues/q/message", None, "no operation of the SDK has this method and path"),
    ],
)
def test_a_request_the_sdk_does_not_define_is_caught(method: str, url: str, body: Any, wrong: str) -> None:
    with pytest.raises(AssertionError, match=re.escape(wrong)):
        check_request(method, url, None if body is None else json.dumps(body))
