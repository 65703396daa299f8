"""Connection settings resolved as Azure Functions resolves them (GetWebJobsConnectionStringSection)."""

from __future__ import annotations

import pytest

from worker.backends.azure.connection import parse_connection_string
from worker.settings.connections import ConnectionSettingError, MissingConnection, resolve

KEY_STRING = "AccountName=acct;AccountKey=a2V5"


def q(
    name: str | None,
    environ: dict[str, str] | None = None,
    connections: dict[str, str] | None = None,
    service: str = "queue",
    embedded_default: bool = False,
):  # type: ignore[no-untyped-def]
    return resolve(
        name,
        service,
        environ=environ or {},
        connections=connections or {},  # type: ignore[arg-type]
        embedded_default=embedded_default,
    )


def test_the_prefixed_name_is_looked_up_before_the_plain_one() -> None:
    found = q("Orders", {"Orders": "plain", "AzureWebJobsOrders": "prefixed"})
    assert (found.setting, found.value) == ("AzureWebJobsOrders", "prefixed")
    assert q("Orders", {"Orders": "plain"}).setting == "Orders"


def test_connection_strings_entries_come_before_plain_settings() -> None:
    found = q("Orders", {"Orders": "plain", "ConnectionStrings__Orders": "from-connection-strings"})
    assert (found.setting, found.value) == ("ConnectionStrings__Orders", "from-connection-strings")


def test_the_environment_comes_before_host_yaml() -> None:
    found = q("Orders", {"Orders": "env"}, {"Orders": "yaml"})
    assert (found.value, found.source) == ("env", "environment")
    found = q("Orders", {}, {"Orders": "yaml"})
    assert (found.value, found.source) == ("yaml", "host.yaml")


def test_a_value_anywhere_comes_before_an_identity_section() -> None:
    """As in .NET's layered configuration: a section with a value is a connection string."""
    found = q("Orders", {"Orders__queueServiceUri": "https://env.queue.core.windows.net"}, {"Orders": KEY_STRING})
    assert found.value == KEY_STRING


@pytest.mark.parametrize(
    ("settings", "service", "endpoint"),
    [
        ({"Orders__queueServiceUri": "https://q.example/acct"}, "queue", "https://q.example/acct"),
        ({"Orders__blobServiceUri": "https://b.example/acct"}, "blob", "https://b.example/acct"),
        ({"Orders__serviceUri": "https://s.example/acct"}, "queue", "https://s.example/acct"),
        ({"Orders__serviceUri": "https://s.example/acct"}, "blob", "https://s.example/acct"),
        ({"Orders__accountName": "acct"}, "queue", "https://acct.queue.core.windows.net"),
        ({"Orders__accountName": "acct"}, "blob", "https://acct.blob.core.windows.net"),
        ({"orders__QUEUESERVICEURI": "https://q.example/acct"}, "queue", "https://q.example/acct"),
        (
            {"Orders__queueServiceUri": "https://q.example/acct", "Orders__accountName": "other"},
            "queue",
            "https://q.example/acct",
        ),
    ],
)
def test_identity_sections_give_the_endpoint_of_the_service(settings: dict[str, str], service: str, endpoint: str) -> None:
    found = q("Orders", settings, service=service)
    assert found.setting == "AzureWebJobsOrders__*" or found.setting == "Orders__*"
    parsed = parse_connection_string(found.value or "")
    assert parsed.use_identity and parsed.account_key is None
    assert (parsed.queue_endpoint if service == "queue" else parsed.blob_endpoint) == endpoint


def test_identity_client_id_and_managed_identity_credential() -> None:
    found = q("Orders", {"Orders__accountName": "acct", "Orders__credential": "ManagedIdentity", "Orders__clientId": "cid"})
    parsed = parse_connection_string(found.value or "")
    assert parsed.use_identity and parsed.identity_client_id == "cid"


def test_an_identity_credential_other_than_managed_identity_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConnectionSettingError, match="Orders__credential must be 'managedidentity'"):
        q("Orders", {"Orders__accountName": "acct", "Orders__credential": "clientsecret"})


def test_a_section_without_an_endpoint_for_the_service_names_the_setting_to_add() -> None:
    with pytest.raises(ConnectionSettingError, match="set Orders__queueServiceUri"):
        q("Orders", {"Orders__blobServiceUri": "https://b.example/acct"})


def test_a_missing_connection_gives_the_functions_message() -> None:
    with pytest.raises(MissingConnection) as caught:
        q("Orders", {"Other": KEY_STRING})
    assert str(caught.value) == (
        "Storage account connection string 'AzureWebJobsOrders' does not exist. Make sure that it is a defined App Setting."
    )


def test_no_connection_means_azure_web_jobs_storage_and_only_a_worker_app_binding_falls_back() -> None:
    assert q(None, {"AzureWebJobsStorage": KEY_STRING}).value == KEY_STRING
    assert q("", {"Storage": KEY_STRING}).value == KEY_STRING  # "Storage" is what "AzureWebJobsStorage" is made of
    with pytest.raises(MissingConnection, match="'AzureWebJobsStorage' does not exist"):
        q(None)
    fallback = q(None, embedded_default=True)
    assert (fallback.value, fallback.embedded_default) == (None, True)
    with pytest.raises(MissingConnection):  # a named connection never falls back
        q("AzureWebJobsStorage", embedded_default=True)


def test_the_embedded_queue_is_chosen_explicitly() -> None:
    assert q("Orders", {}, {"Orders": "sqlite:///orders.db"}).value == "sqlite:///orders.db"


def test_a_missing_connection_names_the_settings_it_found_empty() -> None:
    with pytest.raises(MissingConnection) as caught:
        q(None, {"AzureWebJobsStorage__accountName": "", "Other": KEY_STRING})
    assert str(caught.value).endswith("Found set but empty: AzureWebJobsStorage__accountName.")
