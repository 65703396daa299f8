"""worker.settings.http_token and worker.httpHost: the endpoints' address and the token that guards them."""

from __future__ import annotations

import secrets
import textwrap
from pathlib import Path

import pytest

from worker.settings.config import ConfigError, ConfigErrors, load_config
from worker.settings.http_token import MAKE_ONE, MIN_LENGTH, TOKEN_ENV, http_token

TOKEN = "c2VjcmV0LXRva2VuLWZvci10ZXN0cw=="


def config_in(folder: Path, text: str) -> Path:
    path = folder / "host.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1", "::", "::1", "localhost", "worker-0.internal"])
def test_http_host_accepts_addresses_and_host_names(tmp_path: Path, host: str) -> None:
    path = config_in(tmp_path, f"worker:\n  httpHost: '{host}'\n")
    assert load_config(path, environ={}).http_host == host


@pytest.mark.parametrize("host", ["", "not a host", "0.0.0.0:8080", "http://localhost"])
def test_http_host_refuses_what_is_not_an_address(tmp_path: Path, host: str) -> None:
    path = config_in(tmp_path, f"worker:\n  httpHost: '{host}'\n")
    with pytest.raises(ConfigError, match=r"host.yaml:2: worker.httpHost: expected an address") as error:
        load_config(path, environ={})
    assert error.value.key == "worker.httpHost"


def test_http_host_defaults_to_every_interface() -> None:
    assert load_config(None, environ={}).http_host == "0.0.0.0"


def test_a_token_in_the_settings_file_is_refused_without_repeating_it(tmp_path: Path) -> None:
    path = config_in(tmp_path, f"worker:\n  httpPort: 8080\n  httpToken: {TOKEN}\n")
    with pytest.raises(ConfigError, match=rf"host.yaml:3: worker.httpToken: .*{TOKEN_ENV}") as error:
        load_config(path, environ={})
    assert TOKEN not in str(error.value)


def test_the_token_comes_from_the_environment() -> None:
    token = http_token(load_config(None, environ={}), {TOKEN_ENV: f" {TOKEN}\n"})
    assert token is not None and token.accepts(f"Bearer {TOKEN}")
    assert TOKEN not in repr(token) and TOKEN_ENV in repr(token)


def test_no_token_unless_one_is_set() -> None:
    assert http_token(load_config(None, environ={}), {}) is None


def test_the_token_file_is_read_beside_host_yaml_without_its_last_newline(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n", encoding="utf-8")
    config = load_config(config_in(tmp_path, "worker:\n  httpTokenFile: token\n"), environ={})
    token = http_token(config, {})
    assert token is not None and token.accepts(f"Bearer {TOKEN}")


@pytest.mark.parametrize(
    ("file_text", "environ", "problem"),
    [
        (None, {}, "cannot read .*token: No such file"),
        ("\n", {}, "is empty"),
        ("two words\n", {}, "characters a header cannot carry"),
        (TOKEN, {TOKEN_ENV: TOKEN}, f"both it and {TOKEN_ENV} are set"),
    ],
)
def test_an_unusable_token_is_refused(tmp_path: Path, file_text: str | None, environ: dict[str, str], problem: str) -> None:
    if file_text is not None:
        (tmp_path / "token").write_text(file_text, encoding="utf-8")
    config = load_config(config_in(tmp_path, "worker:\n  httpTokenFile: token\n"), environ={})
    with pytest.raises(ConfigError, match=problem) as error:
        http_token(config, environ)
    assert error.value.key == "worker.httpTokenFile" and "two words" not in str(error.value)


def test_an_empty_token_in_the_environment_is_refused() -> None:
    with pytest.raises(ConfigError, match=f"{TOKEN_ENV}: the token in environment {TOKEN_ENV} is empty"):
        http_token(load_config(None, environ={}), {TOKEN_ENV: " "})


@pytest.mark.parametrize(
    ("header", "accepted"),
    [
        (f"Bearer {TOKEN}", True),
        (f"bearer {TOKEN}", True),
        (f"Basic {TOKEN}", False),
        (f"Bearer {TOKEN[:-3]}", False),
        (f"Bearer {TOKEN}x", False),
        ("Bearer", False),
        ("Bearer é", False),
        (None, False),
    ],
)
def test_accepts_only_its_own_token_as_a_bearer(header: str | None, accepted: bool) -> None:
    token = http_token(load_config(None, environ={}), {TOKEN_ENV: TOKEN})
    assert token is not None and token.accepts(header) is accepted


@pytest.mark.parametrize("token", ["x", "a" * (MIN_LENGTH - 1)])
def test_a_short_token_is_refused_in_one_line_that_says_how_to_make_one(token: str) -> None:
    with pytest.raises(ConfigError) as error:
        http_token(load_config(None, environ={}), {TOKEN_ENV: token})
    assert str(error.value) == (
        f"{TOKEN_ENV}: the token in environment {TOKEN_ENV} has {len(token)} character{'s' * (len(token) > 1)}, fewer "
        f"than {MIN_LENGTH}; make one with {MAKE_ONE}"
    )
    assert "\n" not in str(error.value)


def test_a_token_of_the_least_length_is_accepted_and_the_made_one_is_long_enough() -> None:
    token = http_token(load_config(None, environ={}), {TOKEN_ENV: "a" * MIN_LENGTH})
    assert token is not None and token.accepts("Bearer " + "a" * MIN_LENGTH)
    # What the refusal's command makes (secrets' URL-safe base64) is long enough and fits a header.
    assert "secrets.token_urlsafe(32)" in MAKE_ONE
    assert http_token(load_config(None, environ={}), {TOKEN_ENV: secrets.token_urlsafe(32)}) is not None


def test_a_short_token_with_characters_a_header_cannot_carry_is_refused_for_both_at_once(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("two words\n", encoding="utf-8")
    config = load_config(config_in(tmp_path, "worker:\n  httpTokenFile: token\n"), environ={})
    with pytest.raises(ConfigErrors) as error:
        http_token(config, {})
    assert [e.problem.split(";")[0].split(",")[0] for e in error.value.errors] == [
        f"the token in file {tmp_path / 'token'} has 9 characters",
        f"the token in file {tmp_path / 'token'} holds characters a header cannot carry as they are",
    ]
