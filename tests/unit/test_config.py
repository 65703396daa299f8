"""worker.settings.config: host.yaml shaped like Azure Functions' host.json, with environment overrides."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from worker.settings.config import ConfigError, HostConfig, load_config, parse_duration
from worker.settings.connections import MissingConnection

REPO_ROOT = Path(__file__).resolve().parents[2]

#: An empty environment, so that WORKER__* variables of the machine running the tests cannot leak in.
NO_ENV: dict[str, str] = {}


def write(folder: Path, text: str, name: str = "host.yaml") -> Path:
    """Write ``text`` (dedented) to ``folder/name`` and return the path."""
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def assert_names_key_and_line(error: ConfigError, key: str, where: str) -> None:
    """The message must carry the dotted key and ``where`` (file:line), the line not a prefix of a longer one."""
    message = str(error)
    assert error.key == key
    assert key in message, message
    assert re.search(re.escape(where) + r"(?!\d)", message), message


# -- defaults ---------------------------------------------------------------------------------------------------


def test_defaults_match_azure_functions() -> None:
    config = load_config(None, environ=NO_ENV)
    assert config.batch_size == 16
    assert config.max_dequeue_count == 5
    assert config.visibility_timeout == 0.0
    assert config.max_polling_interval == 60.0
    assert config.message_encoding == "base64"
    assert config.lease_duration == 600.0
    assert config.function_timeout == 30 * 60.0
    assert config.new_batch_threshold == 16 // 2 * (os.cpu_count() or 1)
    assert config.connections == {}
    assert config.ignored_keys == ()


def test_dataclass_defaults_equal_loaded_defaults() -> None:
    """Code that builds HostConfig() directly (tests, embedding) gets the same settings as an empty host.yaml."""
    loaded = load_config(None, environ=NO_ENV)
    assert dataclasses.replace(loaded, base_dir=Path("/x")) == HostConfig(base_dir=Path("/x"))


@pytest.mark.parametrize(
    ("queues_yaml", "expected"),
    [
        ("{}", 16 // 2 * 3),
        ("{batchSize: 10}", 10 // 2 * 3),
        ("{batchSize: 7}", 7 // 2 * 3),
        ("{batchSize: 10, newBatchThreshold: 2}", 2),
    ],
)
def test_new_batch_threshold_defaults_to_half_the_batch_times_processors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queues_yaml: str, expected: int
) -> None:
    """As in Functions: batchSize // 2 * processor count, unless set. Three processors tell the factors apart."""
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    config = load_config(write(tmp_path, f"extensions:\n  queues: {queues_yaml}\n"), environ=NO_ENV)
    assert config.new_batch_threshold == expected


def test_sample_host_yaml_loads_with_the_values_it_states() -> None:
    config = load_config(REPO_ROOT / "host.yaml", environ=NO_ENV)
    assert config.version == "1.0"
    assert config.function_timeout == 5 * 60.0
    assert config.batch_size == 16
    assert config.new_batch_threshold == 8
    assert config.max_polling_interval == 2.0
    assert config.visibility_timeout == 0.0
    assert config.max_dequeue_count == 5
    assert config.message_encoding == "base64"
    assert config.lease_duration == 600.0
    assert config.drain_timeout == 30.0
    assert config.base_dir == REPO_ROOT
    assert config.ignored_keys == ()


# -- durations --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("00:00:00", 0.0),
        ("00:05:00", 300.0),
        ("01:30:15", 5415.0),
        ("0:00:30", 30.0),
        ("00:00:00.25", 0.25),
        ("1.00:00:00", 86400.0),
        ("2.03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5.0),
        ("30s", 30.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("250ms", 0.25),
        ("1.5s", 1.5),
        ("10 m", 600.0),
        (" 30s ", 30.0),
        (45, 45.0),
        (0.5, 0.5),
        (0, 0.0),
        ("-5s", -5.0),  # well written: each setting's range refuses it as out of range
        ("-1.00:00:30", -86430.0),
    ],
)
def test_parse_duration_accepts(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "5",
        "ten seconds",
        "10 minutes",
        "30sec",
        "5y",
        "--5s",
        "00:05",
        "0:0:1",
        "1:02:03:04",
        "00:00:xx",
        "1e3",
        "s",
        True,
        False,
        None,
        [30],
        {"s": 30},
    ],
)
def test_parse_duration_rejects(text: Any) -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(text)


def test_duration_settings_read_every_form_from_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        functionTimeout: "1.00:00:00"
        extensions:
          queues:
            maxPollingInterval: 250ms
            visibilityTimeout: 30
        worker:
          leaseDuration: 10m
          drainTimeout: "00:00:45"
        """,
    )
    config = load_config(path, environ=NO_ENV)
    assert config.function_timeout == 86400.0
    assert config.max_polling_interval == 0.25
    assert config.visibility_timeout == 30.0
    assert config.lease_duration == 600.0
    assert config.drain_timeout == 45.0


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('"-00:05:00"', "must be between 1s and 70d, got -5m"),
        ('"-30s"', "must be between 1s and 70d, got -30s"),
        ('"71.00:00:00"', "must be between 1s and 70d, got 71d"),
        ("0", "must be between 1s and 70d, got 0s"),
    ],
)
def test_a_function_timeout_out_of_range_is_reported_as_out_of_range(tmp_path: Path, value: str, problem: str) -> None:
    """Well written, but too long or not positive: the range, in the units the settings use, not "expected a
    duration like"."""
    path = write(tmp_path, f"functionTimeout: {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=NO_ENV)
    assert str(caught.value) == f"{path}:1: functionTimeout: {problem}"


@pytest.mark.parametrize(
    ("text", "key", "guess"),
    [
        ("worker:\n  handlerthreads: 4\n", "worker.handlerthreads", "worker.handlerThreads"),
        ("extension:\n  queues:\n    batchSize: 4\n", "extension.queues.batchSize", "extensions.queues.batchSize"),
        ("fuctions:\n  resize:\n    batchSize: 4\n", "fuctions.resize.batchSize", "functions.resize.batchSize"),
        ("functions:\n  resize:\n    maxDequeCount: 4\n", "functions.resize.maxDequeCount", "maxDequeueCount"),
        ("worker:\n  bogus: 1\n", "worker.bogus", None),
    ],
)
def test_an_unknown_key_says_what_it_likely_misspells_and_every_known_key(
    tmp_path: Path, text: str, key: str, guess: str | None
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), environ=NO_ENV)
    assert caught.value.key == key
    hint = f"; did you mean {guess}?" if guess else ""
    assert caught.value.problem.startswith(f"unknown key{hint} (")
    if not key.startswith("functions."):
        listed = caught.value.problem.split("(known keys: ", 1)[1].rstrip(")").split(", ")
        assert {"functions", "connections", "worker.handlerThreads"} <= set(listed)


@pytest.mark.parametrize("value", ["-1", '"-1"'])
def test_function_timeout_minus_one_means_no_limit(tmp_path: Path, value: str) -> None:
    config = load_config(write(tmp_path, f"functionTimeout: {value}\n"), environ=NO_ENV)
    assert config.function_timeout is None


# -- environment overrides --------------------------------------------------------------------------------------


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    path = write(
        tmp_path,
        """
        extensions:
          queues:
            batchSize: 16
            messageEncoding: base64
        """,
    )
    config = load_config(
        path,
        environ={
            "WORKER__extensions__queues__batchSize": "4",
            "WORKER__extensions__queues__messageEncoding": "none",
            "WORKER__worker__leaseDuration": "00:02:00",
            "UNRELATED": "ignored",
        },
    )
    assert config.batch_size == 4
    assert config.message_encoding == "none"
    assert config.lease_duration == 120.0
    # The derived default follows the overridden batch size, not the file's.
    assert config.new_batch_threshold == 2


def test_environment_applies_without_a_file() -> None:
    config = load_config(None, environ={"WORKER__extensions__queues__maxDequeueCount": "9"})
    assert config.max_dequeue_count == 9


def test_environment_unknown_key_names_the_key_and_the_variable() -> None:
    variable = "WORKER__extensions__queues__batchsize"
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ={variable: "4"})
    assert caught.value.key == "extensions.queues.batchsize"
    assert "extensions.queues.batchsize" in str(caught.value)
    assert variable in str(caught.value)


def test_functions_app_settings_override_host_json_and_the_hosts_own_override_them(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '{"extensions": {"queues": {"maxDequeueCount": 5, "batchSize": 8}},'
        ' "logging": {"logLevel": {"default": "Information"}}}',
        name="host.json",
    )
    config = load_config(
        path,
        environ={
            "AzureFunctionsJobHost__extensions__queues__maxDequeueCount": "1",
            "AZUREFUNCTIONSJOBHOST__Extensions__Queues__BatchSize": "2",  # any case, as .NET's configuration reads it
            "AzureFunctionsJobHost__extensions__queues__visibilityTimeout": "00:00:10",
            "AzureFunctionsJobHost__logging__logLevel__Host.Aggregator": "Trace",
            "AzureFunctionsJobHost__functionTimeout": "00:02:00",
            "WORKER__extensions__queues__batchSize": "4",  # the host's own wins over Functions'
        },
    )
    assert (config.max_dequeue_count, config.batch_size, config.visibility_timeout) == (1, 4, 10.0)
    assert config.function_timeout == 120.0
    assert config.log_levels == {"default": "Information", "Host.Aggregator": "Trace"}
    assert config.ignored_keys == ()


def test_functions_app_settings_for_keys_the_host_does_not_use_are_listed_as_ignored() -> None:
    config = load_config(
        None,
        environ={
            "AzureFunctionsJobHost__extensionBundle__id": "Microsoft.Azure.Functions",
            "AzureFunctionsJobHost__functions__0": "resize",
            "AzureFunctionsJobHost__logging__applicationInsights__samplingSettings__isEnabled": "false",
        },
    )
    assert config.ignored_keys == ("extensionBundle", "functions", "logging.applicationInsights")


def test_a_bad_functions_app_setting_names_the_variable() -> None:
    variable = "AzureFunctionsJobHost__extensions__queues__maxDequeueCount"
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ={variable: "0"})
    assert caught.value.key == "extensions.queues.maxDequeueCount" and variable in str(caught.value)


def test_functions_process_and_thread_counts_apply_unless_the_hosts_settings_say_otherwise(tmp_path: Path) -> None:
    counts = {"FUNCTIONS_WORKER_PROCESS_COUNT": "3", "PYTHON_THREADPOOL_THREAD_COUNT": "7"}
    config = load_config(None, environ=counts)
    assert (config.processes, config.handler_threads) == (3, 7)
    path = write(tmp_path, "worker:\n  handlerThreads: 2\n")
    config = load_config(path, environ={**counts, "WORKER__worker__processes": "1"})
    assert (config.processes, config.handler_threads) == (1, 2)
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ={"PYTHON_THREADPOOL_THREAD_COUNT": "none"})
    assert "PYTHON_THREADPOOL_THREAD_COUNT" in str(caught.value)


def test_environment_bad_value_names_the_variable(tmp_path: Path) -> None:
    variable = "WORKER__extensions__queues__batchSize"
    path = write(tmp_path, "extensions:\n  queues:\n    batchSize: 8\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={variable: "many"})
    assert caught.value.key == "extensions.queues.batchSize"
    assert variable in str(caught.value)
    assert "host.yaml:3" not in str(caught.value)  # the bad value came from the environment, not the file


# -- errors: key and file:line ----------------------------------------------------------------------------------

# Each case puts the offending key on line 6, below valid settings, so that a wrong line number shows.
_PREAMBLE = """\
# host settings
version: "1.0"
extensions:
  queues:
"""


@pytest.mark.parametrize(
    ("body", "key", "problem"),
    [
        pytest.param("    batchSize: 40\n", "extensions.queues.batchSize", "between 1 and 32", id="batch-size-40"),
        pytest.param("    batchSize: 0\n", "extensions.queues.batchSize", "between 1 and 32", id="batch-size-0"),
        pytest.param("    batchSize: 33\n", "extensions.queues.batchSize", "got 33", id="batch-size-33"),
        pytest.param('    batchSize: "many"\n', "extensions.queues.batchSize", "whole number", id="wrong-type"),
        pytest.param("    batchSize: 2.5\n", "extensions.queues.batchSize", "whole number", id="float-count"),
        pytest.param("    batchsize: 4\n", "extensions.queues.batchsize", "unknown key", id="typo"),
        pytest.param("    maxDequeueCount: 0\n", "extensions.queues.maxDequeueCount", "between 1", id="dequeue-0"),
        pytest.param(
            "    visibilityTimeout: soon\n",
            "extensions.queues.visibilityTimeout",
            "expected a duration",
            id="bad-duration",
        ),
        pytest.param("    messageEncoding: utf8\n", "extensions.queues.messageEncoding", "base64, none", id="encoding"),
        pytest.param("    visibilityTimeout: 8d\n", "extensions.queues.visibilityTimeout", "between", id="vis-8d"),
        pytest.param("    visibilityTimeout: .nan\n", "extensions.queues.visibilityTimeout", "got NaN", id="vis-nan"),
    ],
)
def test_error_names_the_dotted_key_and_its_line(tmp_path: Path, body: str, key: str, problem: str) -> None:
    path = write(tmp_path, _PREAMBLE + "    maxPollingInterval: 5s\n" + body)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=NO_ENV)
    assert_names_key_and_line(caught.value, key, f"{path}:6")
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        pytest.param("version: '1.0'\nbatchSize: 4\n", "batchSize", 2, id="unknown-top-level"),
        pytest.param(
            "version: '1.0'\nextensions:\n  queues:\n    batchSize: 8\n  queue:\n    batchSize: 8\n",
            "extensions.queue.batchSize",
            6,
            id="unknown-section",
        ),
        pytest.param("worker:\n  drainTimeout: 10s\n  leaseDuration: 0\n", "worker.leaseDuration", 3, id="lease-0"),
        pytest.param("functionTimeout: '00:00:00'\n", "functionTimeout", 1, id="timeout-0"),
        pytest.param("functionTimeout: forever\n", "functionTimeout", 1, id="timeout-text"),
        pytest.param("# copied\nversion: [2]\n", "version", 2, id="version-not-text"),
        pytest.param(
            "worker:\n  httpAllowedHosts: [ok.example, 'no such']\n",
            "worker.httpAllowedHosts",
            2,
            id="allowed-host-not-a-name",
        ),
        pytest.param("worker:\n  httpOpenData: yes please\n", "worker.httpOpenData", 2, id="open-data-not-boolean"),
    ],
)
def test_error_names_key_and_line_outside_queues(tmp_path: Path, text: str, key: str, line: int) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=NO_ENV)
    assert_names_key_and_line(caught.value, key, f"{path}:{line}")


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        pytest.param("version: '1.0'\nworker: 5\n", "worker", 2, id="worker-scalar"),
        pytest.param("version: '1.0'\nextensions:\n  queues: [1]\n", "extensions.queues", 3, id="queues-list"),
    ],
)
def test_a_section_given_a_value_is_a_type_error_not_an_unknown_key(tmp_path: Path, text: str, key: str, line: int) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=NO_ENV)
    assert_names_key_and_line(caught.value, key, f"{path}:{line}")
    assert "expected a mapping of" in str(caught.value) and "unknown" not in str(caught.value)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    """The mis-indented key on line 5 is where PyYAML stops; the message must point there."""
    path = write(tmp_path, "version: '1.0'\nextensions:\n  queues:\n    batchSize: 8\n   maxDequeueCount: 5\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=NO_ENV)
    message = str(caught.value)
    assert "not valid YAML" in message
    assert re.search(re.escape(f"{path}:5") + r"(?!\d)", message), message


def test_top_level_list_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "- batchSize: 4\n- maxDequeueCount: 5\n")
    with pytest.raises(ConfigError, match="expected a mapping") as caught:
        load_config(path, environ=NO_ENV)
    assert str(path) in str(caught.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml", environ=NO_ENV)


def test_config_error_is_a_value_error() -> None:
    """Callers that catch ValueError (argparse types, for one) see config errors too."""
    assert issubclass(ConfigError, ValueError)


# -- host.json compatibility ------------------------------------------------------------------------------------


def test_host_json_only_keys_are_accepted_and_listed(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        version: "2.0"
        logging:
          logLevel:
            default: Information
          applicationInsights:
            samplingSettings:
              isEnabled: true
        extensionBundle:
          id: Microsoft.Azure.Functions.ExtensionBundle
          version: "[4.*, 5.0.0)"
        extensions:
          http:
            routePrefix: api
          queues:
            batchSize: 8
        """,
    )
    config = load_config(path, environ=NO_ENV)
    assert config.ignored_keys == ("extensionBundle", "extensions.http", "logging.applicationInsights")
    assert config.log_levels == {"default": "Information"}  # logging.logLevel is read (host.json's log levels)
    assert config.batch_size == 8
    assert config.version == "2.0"


def test_host_json_file_loads(tmp_path: Path) -> None:
    """A host.json copied from a Functions app loads unchanged."""
    host_json = {
        "version": "2.0",
        "functionTimeout": "00:10:00",
        "logging": {"applicationInsights": {"samplingSettings": {"isEnabled": True}}},
        "extensions": {
            "queues": {
                "maxPollingInterval": "00:00:02",
                "visibilityTimeout": "00:00:30",
                "batchSize": 8,
                "maxDequeueCount": 3,
                "newBatchThreshold": 4,
                "messageEncoding": "none",
            }
        },
    }
    path = tmp_path / "host.json"
    path.write_text(json.dumps(host_json, indent=2), encoding="utf-8")
    config = load_config(path, environ=NO_ENV)
    assert config.function_timeout == 600.0
    assert config.max_polling_interval == 2.0
    assert config.visibility_timeout == 30.0
    assert config.batch_size == 8
    assert config.max_dequeue_count == 3
    assert config.new_batch_threshold == 4
    assert config.message_encoding == "none"
    assert config.ignored_keys == ("logging.applicationInsights",)


def test_host_json_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    path.write_text('{\n  "version": "2.0",\n  "extensions": {\n    "queues": {\n      "batchSize": 64\n    }\n  }\n}\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=NO_ENV)
    assert_names_key_and_line(caught.value, "extensions.queues.batchSize", f"{path}:5")


def test_host_json_with_comments_and_trailing_commas_loads_as_functions_reads_it(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        {
          // host.json templates carry comments; Functions' reader takes them
          "version": "2.0",
          /* and block comments,
             over several lines */
          "extensions": {
            "queues": {
              "batchSize": 8, // "batchSize": 64 would be out of range
              "maxDequeueCount": 3,
            },
          },
          "connections": { "Orders": "sqlite:///orders.db?x=//not-a-comment/*nor-this*/" },
        }
        """,
        "host.json",
    )
    config = load_config(path, environ=NO_ENV)
    assert (config.batch_size, config.max_dequeue_count) == (8, 3)
    assert config.connections == {"Orders": "sqlite:///orders.db?x=//not-a-comment/*nor-this*/"}


def test_host_json_error_after_a_comment_still_names_its_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        {
          /* a comment
             of three lines */
          "extensions": { "queues": { "batchSize": 64 } }
        }
        """,
        "host.json",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=NO_ENV)
    assert_names_key_and_line(caught.value, "extensions.queues.batchSize", f"{path}:4")


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("{\n  'version': '2.0'\n}\n", 2, 3),  # single quotes: YAML would have taken them
        ('{\n  "version": "2.0"\n  "functionTimeout": "00:05:00"\n}\n', 3, 3),  # a missing comma
        ('{\n  "version": 2.0, /* never closed\n}\n', 2, 19),
    ],
)
def test_host_json_that_is_not_json_is_refused_with_line_and_column(
    tmp_path: Path, text: str, line: int, column: int
) -> None:
    path = tmp_path / "host.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=NO_ENV)
    message = str(caught.value)
    assert "not valid JSON" in message and f"line {line}, column {column}" in message and f"{path}:{line}" in message


# -- connections and base_dir -----------------------------------------------------------------------------------


def test_connections_environment_takes_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(
        tmp_path,
        """
        connections:
          Orders: "sqlite:///orders.db"
          Billing: "sqlite:///billing.db"
        """,
    )
    monkeypatch.delenv("Orders", raising=False)
    monkeypatch.setenv("Billing", "sqlite:///from-env.db")
    monkeypatch.delenv("Nowhere", raising=False)
    monkeypatch.delenv("AzureWebJobsStorage", raising=False)
    config = load_config(path, environ=NO_ENV)
    assert config.connections == {"Orders": "sqlite:///orders.db", "Billing": "sqlite:///billing.db"}
    assert config.connection_string("Orders") == "sqlite:///orders.db"
    assert config.connection_string("Billing") == "sqlite:///from-env.db"
    with pytest.raises(MissingConnection, match="'AzureWebJobsNowhere' does not exist"):
        config.connection_string("Nowhere")
    assert config.connection_string(None) is None  # a binding that names none: the embedded queue


def test_connection_can_come_from_a_worker_variable(tmp_path: Path) -> None:
    path = write(tmp_path, "connections:\n  Orders: sqlite:///orders.db\n")
    config = load_config(path, environ={"WORKER__connections__Audit": "sqlite:///audit.db"})
    assert config.connections == {"Orders": "sqlite:///orders.db", "Audit": "sqlite:///audit.db"}


@pytest.mark.parametrize(
    "text",
    ["connections: [a, b]\n", "connections:\n  Orders: 5\n"],
    ids=["list", "non-text"],
)
def test_malformed_connections_are_an_error(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=NO_ENV)
    assert_names_key_and_line(caught.value, "connections", f"{path}:1")


def test_base_dir_is_the_folder_of_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    write(conf, "version: '1.0'\n")
    assert load_config(Path("..") / "conf" / "host.yaml", environ=NO_ENV).base_dir == conf.resolve()
    assert load_config(None, environ=NO_ENV).base_dir == elsewhere.resolve()


@pytest.mark.parametrize("text", ["00:60:00", "00:00:60", "1:75:00"])
def test_parse_duration_rejects_impossible_clock_times(text: str) -> None:
    with pytest.raises(ValueError, match="below 60"):
        parse_duration(text)


def test_unquoted_version_number_is_read_as_text(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "version: 2.0\n"), environ=NO_ENV).version == "2.0"


def test_section_with_every_key_commented_out_is_empty(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "extensions:\n  queues:\n    # batchSize: 4\n"), environ=NO_ENV)
    assert config.batch_size == 16


def test_every_problem_in_the_file_and_the_environment_is_listed_at_once(tmp_path: Path) -> None:
    """One run shows all there is to fix: each problem with its key and file:line (or variable), in file order."""
    path = write(
        tmp_path,
        """
        version: "1.0"
        functionTimeout: "abc"
        extensions:
          queues:
            batchSize: 0
        worker:
          bogus: 1
        functions:
          resize:
            maxDequeueCount: 0
            nope: 1
    """,
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, {"WORKER__worker__drainTimeout": "soon"})
    lines = str(caught.value).splitlines()
    assert lines[0] == "6 problems in the settings:"
    # The file's keys, the environment's, then the functions: sections (read once the global values are known).
    assert [line.split(": ")[1] for line in lines[1:]] == [
        "functionTimeout",
        "extensions.queues.batchSize",
        "worker.bogus",
        "worker.drainTimeout",
        "functions.resize.maxDequeueCount",
        "functions.resize.nope",
    ]
    assert lines[1].startswith(f"  {path}:2: ") and lines[4].startswith("  environment WORKER__worker__drainTimeout")


def test_one_problem_reads_as_before(tmp_path: Path) -> None:
    path = write(tmp_path, 'version: "1.0"\nfunctionTimeout: "abc"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    assert_names_key_and_line(caught.value, "functionTimeout", f"{path}:2")
    assert "problems" not in str(caught.value)


def test_the_endpoints_guard_settings_are_read(tmp_path: Path) -> None:
    path = write(tmp_path, "worker:\n  httpOpenData: true\n  httpAllowedHosts: [Worker.Example, 10.0.0.5]\n")
    config = load_config(path, environ=NO_ENV)
    assert (config.http_open_data, config.http_allowed_hosts) == (True, ("Worker.Example", "10.0.0.5"))
    assert (HostConfig().http_open_data, HostConfig().http_allowed_hosts) == (False, ())
