"""worker.backends.azure.connection: every connection-string form Azure Functions accepts, and no secret in any message."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from tests.azurite import ACCOUNT as AZURITE_ACCOUNT
from tests.azurite import KEY as AZURITE_KEY
from tests.cli import run_cli
from worker.backends.azure.connection import (
    DEV_ACCOUNT,
    DEV_ACCOUNT_KEY,
    DEV_QUEUE_ENDPOINT,
    AzureConnection,
    parse_connection_string,
)
from worker.backends.azure.queues import AzureBackend
from worker.backends.embedded.queues import SqliteBackend
from worker.backends.failures import ConnectionStringError
from worker.backends.registry import UnsupportedConnection, open_backend
from worker.backends.registry import describe as describe_connection

#: Made-up secrets, distinctive enough that finding them in a message can only mean a leak.
KEY = "c2VjcmV0LWFjY291bnQta2V5LXRoYXQtbXVzdC1uZXZlci1sZWFr+/0123456789=="
SIG = "sIgNaTuRe%2BsEcReT%3D"
SAS = f"sv=2022-11-02&ss=q&srt=sco&sp=rwdlacup&se=2030-01-01T00:00:00Z&sig={SIG}"


def assert_no_secret(text: str, *secrets: str) -> None:
    for secret in secrets or (KEY, SIG, SAS):
        assert secret not in text, f"secret leaked into {text!r}"


# -- UseDevelopmentStorage ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["UseDevelopmentStorage=true", "usedevelopmentstorage=TRUE;", " UseDevelopmentStorage=True ; "]
)
def test_development_storage_is_the_emulator_with_the_well_known_account(text: str) -> None:
    parsed = parse_connection_string(text)
    assert parsed.queue_endpoint == "http://127.0.0.1:10001/devstoreaccount1" == DEV_QUEUE_ENDPOINT
    assert parsed.account_name == "devstoreaccount1" == DEV_ACCOUNT
    assert parsed.account_key == AZURITE_KEY == DEV_ACCOUNT_KEY
    assert parsed.sas_token is None
    assert not parsed.use_identity


def test_development_storage_false_is_not_the_emulator() -> None:
    with pytest.raises(ConnectionStringError):
        parse_connection_string("UseDevelopmentStorage=false")


# -- account name and key ------------------------------------------------------------------------------------------


def test_account_name_and_key_default_to_https_and_the_public_cloud() -> None:
    parsed = parse_connection_string(f"AccountName=myacct;AccountKey={KEY}")
    assert parsed.queue_endpoint == "https://myacct.queue.core.windows.net"
    assert (parsed.account_name, parsed.account_key, parsed.sas_token) == ("myacct", KEY, None)
    assert not parsed.use_identity


@pytest.mark.parametrize(
    ("protocol", "suffix", "endpoint"),
    [
        ("https", "core.windows.net", "https://myacct.queue.core.windows.net"),
        ("http", "core.windows.net", "http://myacct.queue.core.windows.net"),
        ("https", "core.chinacloudapi.cn", "https://myacct.queue.core.chinacloudapi.cn"),
        ("https", "core.usgovcloudapi.net", "https://myacct.queue.core.usgovcloudapi.net"),
    ],
)
def test_protocol_and_endpoint_suffix_make_the_endpoint(protocol: str, suffix: str, endpoint: str) -> None:
    text = f"DefaultEndpointsProtocol={protocol};AccountName=myacct;AccountKey={KEY};EndpointSuffix={suffix}"
    parsed = parse_connection_string(text)
    assert parsed.queue_endpoint == endpoint
    assert (parsed.account_name, parsed.account_key) == ("myacct", KEY)


def test_key_keeps_its_base64_padding() -> None:
    """The key ends in '=='; splitting pairs at every '=' would cut it."""
    assert parse_connection_string(f"AccountName=a;AccountKey={KEY}").account_key == KEY


def test_keys_are_case_insensitive_and_a_trailing_semicolon_is_allowed() -> None:
    text = f"defaultendpointsprotocol=https;ACCOUNTNAME=myacct;accountkey={KEY};endpointSUFFIX=core.windows.net;"
    parsed = parse_connection_string(text)
    assert parsed.queue_endpoint == "https://myacct.queue.core.windows.net"
    assert (parsed.account_name, parsed.account_key) == ("myacct", KEY)


def test_explicit_queue_endpoint_wins_azurite_style() -> None:
    parsed = parse_connection_string(
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"QueueEndpoint=http://127.0.0.1:10001/{AZURITE_ACCOUNT};"
    )
    assert parsed.queue_endpoint == f"http://127.0.0.1:10001/{AZURITE_ACCOUNT}"
    assert (parsed.account_name, parsed.account_key) == (AZURITE_ACCOUNT, AZURITE_KEY)


def test_other_endpoints_are_ignored() -> None:
    parsed = parse_connection_string(
        f"AccountName=myacct;AccountKey={KEY};BlobEndpoint=https://b.example;QueueEndpoint=https://q.example/myacct"
    )
    assert parsed.queue_endpoint == "https://q.example/myacct"


# -- SAS -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "?"])
def test_sas_with_queue_endpoint(prefix: str) -> None:
    parsed = parse_connection_string(
        f"QueueEndpoint=https://myacct.queue.core.windows.net;SharedAccessSignature={prefix}{SAS}"
    )
    assert parsed.queue_endpoint == "https://myacct.queue.core.windows.net"
    assert parsed.sas_token == SAS, "the SAS keeps its own '=' and '&' and loses a leading '?'"
    assert parsed.account_key is None
    assert not parsed.use_identity


def test_sas_with_account_name_builds_the_endpoint() -> None:
    parsed = parse_connection_string(f"AccountName=myacct;SharedAccessSignature={SAS};")
    assert parsed.queue_endpoint == "https://myacct.queue.core.windows.net"
    assert parsed.sas_token == SAS


# -- what cannot be used ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param(";;", id="only-separators"),
        pytest.param(KEY.rstrip("="), id="no-pairs"),
        pytest.param(f"AccountName=myacct;{KEY.rstrip('=')}", id="a-part-without-equals"),
        pytest.param(f"AccountName=myacct;AccountKey={KEY};garbage{SIG}", id="trailing-garbage"),
        pytest.param(f"AccountKey={KEY}", id="key-without-account"),
        pytest.param(f"QueueEndpoint=https://q.example;AccountKey={KEY}", id="key-and-endpoint-without-account"),
        pytest.param("AccountName=myacct", id="account-without-credential"),
        pytest.param("AccountName=myacct;AccountKey=", id="empty-key"),
        pytest.param("QueueEndpoint=https://q.example", id="endpoint-without-credential"),
        pytest.param(f"SharedAccessSignature={SAS}", id="sas-without-endpoint-or-account"),
        pytest.param("DefaultEndpointsProtocol=https;EndpointSuffix=core.windows.net", id="no-account"),
        pytest.param(f"QueueEndpoint=https://q.example/acct?{SAS};SharedAccessSignature={SAS}", id="sas-twice"),
        pytest.param(f"BlobEndpoint=https://b.example/acct?{SAS};SharedAccessSignature={SAS}", id="sas-twice-blob"),
        pytest.param(
            f"QueueEndpoint=https://me:{SIG}@q.example/acct;AccountName=acct;AccountKey={KEY}", id="key-and-password-in-url"
        ),
    ],
)
def test_unusable_strings_raise_without_the_secret(text: str) -> None:
    with pytest.raises(ConnectionStringError) as caught:
        parse_connection_string(text)
    message = str(caught.value)
    assert message, "the error must say what is wrong"
    assert_no_secret(message, KEY, KEY.rstrip("="), SIG, SAS)
    assert_no_secret(repr(caught.value), KEY, KEY.rstrip("="), SIG, SAS)


# -- no secret in repr or describe ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        f"AccountName=myacct;AccountKey={KEY}",
        f"DefaultEndpointsProtocol=http;AccountName=a;AccountKey={KEY};QueueEndpoint=http://127.0.0.1:10001/a",
        f"QueueEndpoint=https://myacct.queue.core.windows.net;SharedAccessSignature=?{SAS}",
        f"AccountName=myacct;AccountKey={KEY};SharedAccessSignature={SAS}",
    ],
)
def test_repr_and_describe_never_show_the_key_or_sas(text: str) -> None:
    parsed = parse_connection_string(text)
    assert parsed.account_key or parsed.sas_token, "the test needs a connection that holds a secret"
    for shown in (repr(parsed), str(parsed), parsed.describe(), describe_connection(text, Path.cwd())):
        assert_no_secret(shown)
        assert parsed.queue_endpoint in shown


def test_describe_names_the_kind_of_credential() -> None:
    assert "(account key)" in parse_connection_string(f"AccountName=a;AccountKey={KEY}").describe()
    assert "(SAS)" in parse_connection_string(f"AccountName=a;SharedAccessSignature={SAS}").describe()
    identity = parse_connection_string("QueueEndpoint=https://a.queue.core.windows.net;Credential=DefaultAzureCredential")
    assert "(managed identity)" in identity.describe()


def test_describe_of_a_malformed_string_does_not_echo_it() -> None:
    shown = describe_connection(f"AccountKey={KEY};nonsense", Path.cwd())
    assert "malformed" in shown
    assert_no_secret(shown)


# -- identity-based connections ---------------------------------------------------------------------------------------


def test_identity_connection_string_written_directly() -> None:
    parsed = parse_connection_string(
        "QueueEndpoint=https://acct.queue.core.windows.net;Credential=defaultazurecredential;ClientId=abc"
    )
    assert parsed.use_identity and parsed.identity_client_id == "abc"
    assert parsed.queue_endpoint == "https://acct.queue.core.windows.net"


# -- open_backend ------------------------------------------------------------------------------------------------------


async def test_open_backend_unset_is_the_default_embedded_file(tmp_path: Path) -> None:
    backend = open_backend(None, tmp_path)
    try:
        assert isinstance(backend, SqliteBackend)
        assert backend.path == tmp_path / ".worker" / "queues.sqlite3"
    finally:
        await backend.close()


@pytest.mark.parametrize(
    ("connection", "relative"), [("sqlite:///queues.db", "queues.db"), ("sqlite:///sub/dir/q.sqlite3", "sub/dir/q.sqlite3")]
)
async def test_open_backend_sqlite_path_is_relative_to_base_dir(tmp_path: Path, connection: str, relative: str) -> None:
    backend = open_backend(connection, tmp_path)
    try:
        assert isinstance(backend, SqliteBackend)
        assert backend.path == tmp_path / relative
    finally:
        await backend.close()


async def test_open_backend_sqlite_absolute_path(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "q.db"
    backend = open_backend(f"sqlite:///{target}", Path("/nonexistent-base"))
    try:
        assert isinstance(backend, SqliteBackend)
        assert backend.path == target
    finally:
        await backend.close()


@pytest.mark.parametrize(
    "connection",
    [
        "UseDevelopmentStorage=true",
        f"AccountName=myacct;AccountKey={KEY}",
        f"QueueEndpoint=https://myacct.queue.core.windows.net;SharedAccessSignature=?{SAS}",
        "QueueEndpoint=https://myacct.queue.core.windows.net;Credential=DefaultAzureCredential;ClientId=cid",
    ],
)
async def test_open_backend_anything_else_is_azure_storage(tmp_path: Path, connection: str) -> None:
    backend = open_backend(connection, tmp_path)
    try:
        assert isinstance(backend, AzureBackend)
        assert isinstance(backend.connection, AzureConnection)
        assert backend.connection == parse_connection_string(connection)
        assert_no_secret(repr(backend))
    finally:
        await backend.close()
    assert not (tmp_path / ".worker").exists(), "an Azure connection must not create the embedded queue file"


@pytest.mark.parametrize(
    "connection",
    [
        f"AccountKey={KEY}",
        f"AccountName=myacct;AccountKey={KEY};{SIG}",
        f"AccountName=myacct;SharedAccessSignature{SAS}",
        "not a connection string at all",
    ],
)
def test_open_backend_refuses_malformed_strings_without_echoing_them(tmp_path: Path, connection: str) -> None:
    with pytest.raises(UnsupportedConnection) as caught:
        open_backend(connection, tmp_path)
    message = str(caught.value)
    assert message
    assert connection not in message
    assert_no_secret(message)
    shown = "".join(traceback.format_exception(caught.value))
    assert connection not in shown
    assert_no_secret(shown)


# -- refused before any request ------------------------------------------------------------------------------------

#: An account key that is not base64: the SDK would sign every request with garbage, and storage would look down.
NOT_BASE64 = "not-base64!!secret"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"AccountName=myacct;AccountKey={NOT_BASE64}", "AccountKey is not base64"),
        (f"AccountName=myacct;AccountKey={KEY};QueueEndpoint=ftp://host/myacct", "QueueEndpoint must be an http://"),
        (f"AccountName=myacct;AccountKey={KEY};BlobEndpoint=myacct.blob", "BlobEndpoint must be an http://"),
        (f"AccountName=myacct;AccountKey={KEY};DefaultEndpointsProtocol=tcp", "QueueEndpoint must be an http://"),
        ("QueueEndpoint=https://;Credential=managedidentity", "QueueEndpoint must be an http://"),
    ],
    ids=["key-not-base64", "ftp-endpoint", "no-scheme", "bad-protocol", "no-host"],
)
def test_a_connection_string_that_can_never_work_is_refused_without_its_secret(text: str, problem: str) -> None:
    with pytest.raises(ConnectionStringError) as caught:
        parse_connection_string(text)
    assert problem in str(caught.value)
    assert_no_secret(str(caught.value), KEY, NOT_BASE64)


def test_worker_run_refuses_a_key_that_is_not_base64_at_start(tmp_path: Path) -> None:
    """Before: accepted, then every request failed to sign and the host retried for ever as if storage were down."""
    connection = (
        f"DefaultEndpointsProtocol=http;AccountName=myacct;AccountKey={NOT_BASE64};QueueEndpoint=http://127.0.0.1:9/myacct"
    )
    ran = run_cli(
        tmp_path,
        "run",
        "--no-supervisor",
        "--burst",
        "--app",
        "tests.apps.recording:app",
        env={"AzureWebJobsStorage": connection, "RECORD_DB": str(tmp_path / "r.db")},
    )
    assert ran.returncode == 2, ran.stderr
    assert "connection AzureWebJobsStorage: connection string's AccountKey is not base64" in ran.stderr
    assert_no_secret(ran.stderr + ran.stdout, NOT_BASE64)


def test_worker_run_refuses_an_identity_connection_over_http_in_one_line(tmp_path: Path) -> None:
    """Before: a ValueError traceback from the SDK ("Token credential is only supported with HTTPS") at the first call."""
    ran = run_cli(
        tmp_path,
        "run",
        "--no-supervisor",
        "--burst",
        "--app",
        "tests.apps.recording:app",
        env={
            "AzureWebJobsStorage__queueServiceUri": "http://127.0.0.1:10001/devstoreaccount1",
            "RECORD_DB": str(tmp_path / "r.db"),
        },
    )
    assert ran.returncode == 2, ran.stderr
    [line] = [line for line in ran.stderr.splitlines() if "identity-based connection" in line]
    assert "http://127.0.0.1:10001/devstoreaccount1" in line and "https://" in line
    assert "account key or a SAS" in line
    assert "Traceback" not in ran.stderr


def test_a_sas_in_the_endpoint_and_in_shared_access_signature_is_refused_in_one_line() -> None:
    with pytest.raises(ConnectionStringError) as caught:
        parse_connection_string(f"QueueEndpoint=https://q.example/acct?{SAS};SharedAccessSignature={SAS}")
    assert str(caught.value) == (
        "connection string has a SAS both in SharedAccessSignature and in its QueueEndpoint "
        "URL; give it in one place (SharedAccessSignature)"
    )
