"""Each backend states its service's limits; start-up holds every function to the limits of the backend it uses.

The settings are checked before anything opens (no service is needed), and
every problem is one line naming the function, the key and the limit.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from worker.app import WorkerApp
from worker.backends.registry import AZURE, EMBEDDED, OCI, SQS, UnsupportedConnection, backend_kind, open_backend
from worker.ops import preflight
from worker.settings.config import load_config

OCI_CONNECTION = "oci://cell-1.queue.messaging.us-ashburn-1.oci.oraclecloud.com?compartment=ocid1.compartment.oc1..x"


def _problems(tmp_path: Path, host_yaml: str, queue: str = "orders", connection: str | None = None) -> list[str]:
    (tmp_path / "host.yaml").write_text(host_yaml, encoding="utf-8")
    config = load_config(tmp_path / "host.yaml", environ={})
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue, connection="Jobs" if connection else None)
    def orders(msg: str) -> None:
        pass

    if connection:
        config = replace(config, connections={"Jobs": connection})
    return preflight.problems(app, config, environ={})


def test_each_connection_form_names_its_backend() -> None:
    assert backend_kind(None) is EMBEDDED
    assert backend_kind("sqlite:///q.db") is EMBEDDED
    assert backend_kind("UseDevelopmentStorage=true") is AZURE
    assert backend_kind("AccountName=a;AccountKey=k;QueueEndpoint=https://x/y") is AZURE
    assert backend_kind(OCI_CONNECTION) is OCI
    assert backend_kind("oci+http://127.0.0.1:1?compartment=c") is OCI
    assert backend_kind("sqs://?region=us-east-1") is SQS


def test_an_unknown_scheme_is_refused_not_taken_for_azure(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedConnection, match=r"no queue backend for amqp:// connections \(known: sqlite://"):
        open_backend("amqp://broker.example/q", tmp_path)


def test_the_limits_differ_by_service() -> None:
    assert (AZURE.limits.max_batch, EMBEDDED.limits.max_batch, OCI.limits.max_batch) == (32, 32, 20)
    assert OCI.limits.max_visibility == 12 * 3600 < AZURE.limits.max_visibility == 7 * 86400
    assert OCI.capabilities.dead_letter and not AZURE.capabilities.dead_letter
    assert not OCI.capabilities.peek and EMBEDDED.capabilities.peek


def test_batch_size_32_on_oci_is_refused_naming_the_function_and_the_limit(tmp_path: Path) -> None:
    found = _problems(tmp_path, "version: '2.0'\nextensions:\n  queues:\n    batchSize: 32\n", connection=OCI_CONNECTION)
    assert found == [
        "function orders, trigger queueTrigger (msg): extensions.queues.batchSize is 32, more than OCI Queue takes: "
        "at most 20 messages a receive returns"
    ]


def test_the_same_settings_run_on_azure(tmp_path: Path) -> None:
    assert (
        _problems(
            tmp_path, "version: '2.0'\nextensions:\n  queues:\n    batchSize: 32\n", connection="UseDevelopmentStorage=true"
        )
        == []
    )


def test_a_function_section_is_named_with_its_line_and_every_problem_is_listed(tmp_path: Path) -> None:
    found = _problems(
        tmp_path,
        "version: '2.0'\nfunctions:\n  orders:\n    batchSize: 25\n    leaseDuration: 1d\n",
        connection=OCI_CONNECTION,
    )
    assert len(found) == 2, found  # batchSize, and leaseDuration is over 12 hours
    assert "functions.orders.batchSize (" in found[0] and "at most 20 messages" in found[0]
    assert all(line.startswith("function orders, trigger queueTrigger (msg): ") for line in found)
    assert any("leaseDuration" in line and "at most 43200 seconds" in line for line in found), found


@pytest.mark.parametrize("queue", ["Orders", "my_queue", "ab", "a--b", "a" * 64])
def test_names_azure_refuses_are_refused_at_start_on_azure_and_the_embedded_queue(tmp_path: Path, queue: str) -> None:
    for connection in (None, "UseDevelopmentStorage=true"):
        found = _problems(tmp_path, "version: '2.0'\n", queue=queue, connection=connection)
        assert len(found) == 1 and f"queue name {queue!r} is not valid: use 3-63 lowercase letters" in found[0], found


def test_an_oci_display_name_is_fine_on_oci(tmp_path: Path) -> None:
    assert _problems(tmp_path, "version: '2.0'\n", queue="Orders_Queue.v2", connection=OCI_CONNECTION) == []
    found = _problems(tmp_path, "version: '2.0'\n", queue="bad name", connection=OCI_CONNECTION)
    assert found and "(OCI Queue)" in found[0]


@pytest.mark.parametrize("queue", ["abc", "a-b", "a" * 56, "0rders-2", "a" * 56 + "-poison"])
def test_names_azure_takes_are_accepted(tmp_path: Path, queue: str) -> None:
    """Up to 56 characters, so that ``<queue>-poison`` is one too; a poison queue (up to 63) has no poison queue."""
    assert _problems(tmp_path, "version: '2.0'\n", queue=queue) == []


@pytest.mark.parametrize("length", [57, 60, 63])
def test_a_trigger_queue_whose_poison_queue_the_service_refuses_is_refused_at_start(tmp_path: Path, length: int) -> None:
    queue = "a" * length
    for connection in (None, "UseDevelopmentStorage=true"):
        assert _problems(tmp_path, "version: '2.0'\n", queue=queue, connection=connection) == [
            f"function orders, trigger queueTrigger (msg): its poison queue: queue name '{queue}-poison' is not "
            f"valid: use 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or "
            f"digit ({'embedded queue' if connection is None else 'Azure Storage'}), so the trigger queue's name "
            f"must leave room for '-poison' ({length} characters now)"
        ]


def test_on_oci_the_poison_queue_name_counts_only_where_the_host_keeps_poison(tmp_path: Path) -> None:
    queue = "q" * 250
    assert _problems(tmp_path, "version: '2.0'\n", queue=queue, connection=OCI_CONNECTION) == []
    [found] = _problems(tmp_path, "version: '2.0'\n", queue=queue, connection=OCI_CONNECTION + "&poison=host")
    assert f"its poison queue: queue name '{queue}-poison' is not valid" in found


@pytest.mark.parametrize(
    ("suffix", "problem"),
    [
        ("", "compartment=<compartment OCID> is missing"),
        ("?compartment=c&auth=password", "auth must be one of api_key, security_token, instance_principal"),
        ("?compartment=c&poison=never", "poison must be one of service, host"),
        ("?compartment=c&region=x", "unknown keys region"),
        ("?compartment=c&longPoll=31", "longPoll must be whole seconds from 0 to 30, got '31'"),
        ("?compartment=c&longPoll=2.5", "longPoll must be whole seconds from 0 to 30, got '2.5'"),
        ("?compartment=c&longPoll=-1", "longPoll must be whole seconds from 0 to 30, got '-1'"),
        ("?compartment=c&maxMessageBytes=0", "maxMessageBytes must be a whole number of bytes, at least 1, got '0'"),
        ("?compartment=c&maxMessageBytes=256KiB", "maxMessageBytes must be a whole number of bytes, at least 1"),
    ],
)
def test_a_wrong_oci_connection_is_refused_naming_the_key(tmp_path: Path, suffix: str, problem: str) -> None:
    found = _problems(tmp_path, "version: '2.0'\n", connection="oci://cell-1.example.com" + suffix)
    assert len(found) == 1 and problem in found[0], found


@pytest.mark.parametrize(("query", "seconds"), [("", 5.0), ("&longPoll=2", 2.0), ("&longPoll=0", 0.0)])
def test_an_oci_long_poll_is_5_s_unless_the_connection_says(tmp_path: Path, query: str, seconds: float) -> None:
    """The receive's wait at the service, and with it how long an idle worker takes to stop (0: it polls)."""
    backend = open_backend(f"oci+http://127.0.0.1:1?compartment=c{query}", tmp_path)
    assert backend.limits.long_poll == seconds
    assert backend.limits.max_batch == OCI.limits.max_batch  # the rest of the service's limits stay


@pytest.mark.parametrize(("query", "size"), [("", 256 * 1024), ("&maxMessageBytes=524288", 512 * 1024)])
def test_an_oci_message_may_have_256_kib_unless_the_connection_says(tmp_path: Path, query: str, size: int) -> None:
    """Checked before sending, by the backend and by commands that have not opened one (``worker send``)."""
    connection = f"oci+http://127.0.0.1:1?compartment=c{query}"
    assert open_backend(connection, tmp_path).limits.max_message_bytes == size
    assert OCI.limits_of(connection).max_message_bytes == size
    assert OCI.limits_of(connection).max_batch == OCI.limits.max_batch


def test_a_channel_is_refused_where_queues_have_none(tmp_path: Path) -> None:
    app = WorkerApp()

    @app.queue_output(arg_name="out", queue_name="next", channel="eu")
    @app.queue_trigger(arg_name="msg", queue_name="orders", channel="tenant-a")
    def orders(msg: str, out: object) -> None:
        pass

    config = load_config(None, environ={})
    assert preflight.problems(app, config, environ={}) == [
        "function orders, trigger queueTrigger (msg): channel 'tenant-a': embedded queue has no channels",
        "function orders, output binding queue (out): channel 'eu': embedded queue has no channels",
    ]
    on_oci = replace(config, connections={"AzureWebJobsStorage": OCI_CONNECTION})
    assert preflight.problems(app, on_oci, environ={"AzureWebJobsStorage": OCI_CONNECTION}) == []


def test_checkpoints_are_refused_at_start_where_the_backend_cannot_change_content(tmp_path: Path) -> None:
    """OCI Queue's UpdateMessage sets visibility only: a function declared with checkpoints is refused there, in the
    same list as the function's other problems; Azure Storage and the embedded queue take it."""
    (tmp_path / "host.yaml").write_text("version: '2.0'\nextensions:\n  queues:\n    batchSize: 32\n", encoding="utf-8")
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="orders", connection="Jobs", checkpoints=True)
    def orders(msg: object) -> None:
        pass

    config = load_config(tmp_path / "host.yaml", environ={})
    assert preflight.problems(app, replace(config, connections={"Jobs": OCI_CONNECTION}), environ={}) == [
        "function orders, trigger queueTrigger (msg): checkpoints=True: OCI Queue cannot change a message's content "
        "while it is held, so msg.checkpoint could not store anything",
        "function orders, trigger queueTrigger (msg): extensions.queues.batchSize is 32, more than OCI Queue takes: "
        "at most 20 messages a receive returns",
    ]
    for connection in ("sqlite:///q.db", "UseDevelopmentStorage=true"):
        assert preflight.problems(app, replace(config, connections={"Jobs": connection}), environ={}) == []


@pytest.mark.parametrize("connection", ["sqs://?region=us-east-1", OCI_CONNECTION, "UseDevelopmentStorage=true", None])
def test_defaults_past_a_services_limit_start_on_every_backend(tmp_path: Path, connection: str | None) -> None:
    """Functions' batch of 16 is a default: on SQS (10 a receive) it is no reason to refuse the app."""
    assert _problems(tmp_path, "version: '2.0'\n", connection=connection) == []


@pytest.mark.parametrize(
    ("host_yaml", "environ", "key"),
    [
        ("version: '2.0'\nextensions:\n  queues:\n    batchSize: 16\n", {}, "extensions.queues.batchSize"),
        ("version: '2.0'\n", {"WORKER__extensions__queues__batchSize": "16"}, "extensions.queues.batchSize"),
        ("version: '2.0'\nfunctions:\n  orders:\n    batchSize: 16\n", {}, "functions.orders.batchSize"),
    ],
)
def test_the_same_value_given_by_the_user_is_refused(
    tmp_path: Path, host_yaml: str, environ: dict[str, str], key: str
) -> None:
    """Only a value the user gave is refused, wherever it was given, even when it equals the default."""
    (tmp_path / "host.yaml").write_text(host_yaml, encoding="utf-8")
    config = replace(load_config(tmp_path / "host.yaml", environ=environ), connections={"Jobs": "sqs://?region=us-east-1"})
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="orders", connection="Jobs")
    def orders(msg: str) -> None:
        pass

    [found] = preflight.problems(app, config, environ={})
    assert key in found and "is 16, more than Amazon SQS takes: at most 10 messages a receive returns" in found


def test_a_default_takes_each_backends_limit_and_the_batch_threshold_follows(tmp_path: Path) -> None:
    config = load_config(None, environ={})
    own = config.for_function("orders")
    assert own.given == frozenset() and own.batch_size == 16
    fitted, said = own.within(SQS.limits, SQS.name)
    assert (fitted.batch_size, fitted.new_batch_threshold) == (10, 5 * (os.cpu_count() or 1))
    assert said == ["extensions.queues.batchSize 16 -> 10 (Amazon SQS: at most 10 messages a receive returns)"]
    assert own.within(OCI.limits, OCI.name) == (own, [])  # OCI returns 20
    given = replace(config, given=frozenset({"new_batch_threshold"}), new_batch_threshold=3).for_function("orders")
    fitted, _ = given.within(SQS.limits, SQS.name)
    assert (fitted.batch_size, fitted.new_batch_threshold) == (10, 3)
    long_lease = replace(config, lease_duration=13 * 3600.0, given=frozenset()).for_function("orders")
    fitted, said = long_lease.within(OCI.limits, OCI.name)
    assert fitted.lease_duration == 12 * 3600 and said[0].startswith("worker.leaseDuration 46800 -> 43200 (OCI Queue")
