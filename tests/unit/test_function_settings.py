"""worker.settings.function_settings: one table of the per-function settings, and everything made from it.

The loader's keys, FunctionOptions' and HostConfig's fields, the host's "function loaded" view and the settings
reference are each the table's, so that a setting added to the table is a setting everywhere; and a host.yaml (or
the environment) that sets every per-function key for one function gives that function exactly those values.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from worker.runtime.host import _own_settings
from worker.settings import config as settings
from worker.settings.config import ConfigError, FunctionOptions, HostConfig, load_config
from worker.settings.function_settings import FUNCTION_SETTINGS, IN_SECTION, FunctionSetting, PerFunction
from worker.settings.retry import RetryPolicy
from worker.settings.schema import Between, OneOf, parse_integer

REPO = Path(__file__).resolve().parents[2]

#: Values for the settings whose check does not say which values it takes (retry's is its parser): as written in
#: host.yaml, and as read.
WRITTEN = {"retry": ({"strategy": "fixedDelay", "delayInterval": "00:00:07"}, RetryPolicy("fixedDelay", 7.0, 7.0))}


def sample(entry: FunctionSetting) -> tuple[Any, Any]:
    """A value of ``entry`` unlike its default, as written and as read: an end of its range, or another choice."""
    default = getattr(PerFunction(), entry.attr)
    if isinstance(entry.check, Between):
        number = next(end for end in (entry.check.low, entry.check.high) if end != default)
        written = int(number) if entry.parse is parse_integer else number
    elif isinstance(entry.check, OneOf):
        written = next(choice for choice in entry.check.choices if choice != default)
    else:
        return WRITTEN[entry.attr]
    return written, entry.parse(written)


def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", REPO / "docs" / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_function_options_and_host_config_have_a_field_for_each_setting_of_the_table() -> None:
    attrs = [entry.attr for entry in FUNCTION_SETTINGS]
    assert [f.name for f in dataclasses.fields(FunctionOptions)] == [*attrs, "given"]
    assert set(attrs) <= {f.name for f in dataclasses.fields(HostConfig)}
    assert HostConfig().for_function("any") == FunctionOptions()  # the table's defaults, in both
    assert all(entry.meaning and (entry.key or entry.global_key) for entry in FUNCTION_SETTINGS)


def test_the_loader_reads_the_global_keys_and_a_functions_section_exactly_the_tables_keys(tmp_path: Path) -> None:
    globals_ = {entry.global_key: entry for entry in FUNCTION_SETTINGS if entry.global_key is not None}
    assert {key: settings._SCHEMA[key] for key in globals_} == globals_
    path = tmp_path / "host.yaml"
    path.write_text("functions:\n  f:\n    nope: 1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    listed = re.search(r"\(a function may set: (.*)\)", str(caught.value))
    assert listed is not None, str(caught.value)
    assert listed.group(1).split(", ") == sorted(IN_SECTION)
    assert sorted(IN_SECTION) == sorted(entry.key for entry in FUNCTION_SETTINGS if entry.key is not None)


def test_the_settings_reference_lists_the_tables_settings_with_their_words() -> None:
    page = reference().settings_page()
    per_function = re.findall(r"^\| `functions\.<name>\.(\w+)` \|", page, re.MULTILINE)
    assert per_function == list(IN_SECTION)
    for entry in FUNCTION_SETTINGS:
        row = f"| `functions.<name>.{entry.key}` |" if entry.global_key is None else f"| `{entry.global_key}` |"
        line = next(line for line in page.splitlines() if line.startswith(row))
        assert line.endswith(f"| {entry.meaning.replace('|', chr(92) + '|')} |"), line


@pytest.mark.parametrize("source", ["host.yaml", "environment"])
def test_every_per_function_key_set_for_one_function_is_what_it_runs_with(tmp_path: Path, source: str) -> None:
    values = {key: sample(entry) for key, entry in IN_SECTION.items()}
    written = {key: value for key, (value, _) in values.items()}
    if source == "host.yaml":
        path = tmp_path / "host.yaml"
        path.write_text(yaml.safe_dump({"functions": {"f": written}}, sort_keys=False), encoding="utf-8")
        config = load_config(path, environ={})
    else:
        environ = {
            f"WORKER__functions__f__{key}{'__' + part if part else ''}": str(text)
            for key, value in written.items()
            for part, text in (value.items() if isinstance(value, dict) else [("", value)])
        }
        config = load_config(None, environ=environ)

    own = config.for_function("f")
    assert {entry.attr: getattr(own, entry.attr) for entry in IN_SECTION.values()} == {
        entry.attr: values[key][1] for key, entry in IN_SECTION.items()
    }
    assert own.given >= {entry.attr for entry in IN_SECTION.values()}
    assert set(_own_settings(config, own)) == {entry.attr for entry in IN_SECTION.values()}
    assert _own_settings(config, own)["retry"] == WRITTEN["retry"][1].describe()
    for key, entry in IN_SECTION.items():
        assert config.key_of("f", entry.attr).startswith(f"functions.f.{key} (")
    other = config.for_function("g")
    assert all(getattr(other, entry.attr) == getattr(config, entry.attr) for entry in FUNCTION_SETTINGS)
    assert _own_settings(config, other) == {}


def test_a_setting_given_only_globally_is_refused_in_a_functions_section(tmp_path: Path) -> None:
    """messageEncoding is per function only from code (a SAM template), as before the table."""
    path = tmp_path / "host.yaml"
    path.write_text("functions:\n  f:\n    messageEncoding: none\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"host.yaml:3: functions\.f\.messageEncoding: unknown key"):
        load_config(path, environ={})
