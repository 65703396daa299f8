"""The bearer token that guards ``/metrics`` and ``/leases``: read once at start, compared in constant time, never shown.

It comes from ``WORKER_HTTP_TOKEN`` or ``worker.httpTokenFile``, never host.yaml (copied into images).
Without one, the data answers on loopback only (:mod:`worker.runtime.guard`); probes stay open.
A token shorter than :data:`MIN_LENGTH` is refused: wrong tokens are only counted and throttled.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from pathlib import Path

from worker.observability.redaction import remember
from worker.settings.config import ConfigError, HostConfig
from worker.settings.schema import raise_all

#: The environment variable that holds the token.
TOKEN_ENV = "WORKER_HTTP_TOKEN"
#: What a token may hold: RFC 6750's token68 characters, so that it fits an ``Authorization`` header unchanged.
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
#: The fewest characters a token may have.
MIN_LENGTH = 16
#: How to make a token, as the refusals say.
MAKE_ONE = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


class BearerToken:
    """A token and where it came from; its value is never in a repr, a log line or an error message."""

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str) -> None:
        self._value = value.encode("ascii")
        self.source = source

    def __repr__(self) -> str:
        return f"BearerToken(from {self.source})"

    def accepts(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries this token; constant time, so timing tells nothing of it."""
        scheme, _, given = (authorization or "").partition(" ")
        candidate = given.strip().encode("utf-8", errors="surrogateescape")
        # compare_digest runs over the whole of both: a wrong scheme still costs one comparison.
        return hmac.compare_digest(candidate, self._value) and scheme.lower() == "bearer"

    def header(self) -> dict[str, str]:
        """The ``Authorization`` header that carries this token (the supervisor asks its processes with it)."""
        return {"Authorization": f"Bearer {self._value.decode('ascii')}"}


def http_token(config: HostConfig, environ: Mapping[str, str]) -> BearerToken | None:
    """The token the endpoints require, or None when neither ``WORKER_HTTP_TOKEN`` nor ``worker.httpTokenFile`` is set.

    Raises ConfigError when it is set and unusable: both set (which one is meant?), a file that cannot be
    read, an empty token (an operator who set one believes the endpoints guarded), one shorter than
    :data:`MIN_LENGTH`, or characters that cannot travel in a header; every problem of the token at once.
    """
    from_env = environ.get(TOKEN_ENV)
    if from_env is not None and config.http_token_file is not None:
        raise ConfigError("worker.httpTokenFile", f"both it and {TOKEN_ENV} are set; set one")
    if from_env is not None:
        return _checked(from_env.strip(), TOKEN_ENV, f"environment {TOKEN_ENV}")
    if config.http_token_file is None:
        return None
    path = config.base_dir / Path(config.http_token_file).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError("worker.httpTokenFile", f"cannot read {path}: {reason}") from None
    return _checked(text.strip(), "worker.httpTokenFile", f"file {path}")


def _checked(value: str, key: str, source: str) -> BearerToken:
    if not value:
        raise ConfigError(key, f"the token in {source} is empty; make one with {MAKE_ONE}")
    problems = []
    if len(value) < MIN_LENGTH:
        characters = f"{len(value)} character{'' if len(value) == 1 else 's'}"
        problems.append(
            ConfigError(key, f"the token in {source} has {characters}, fewer than {MIN_LENGTH}; make one with {MAKE_ONE}")
        )
    if not _TOKEN68.fullmatch(value):
        problems.append(
            ConfigError(
                key,
                f"the token in {source} holds characters a header cannot carry as they are; "
                "use letters, digits and - . _ ~ + / (base64 or hex, say)",
            )
        )
    raise_all(problems)
    remember(value)  # from now on no channel of this process shows it, whatever quotes it
    return BearerToken(value, source)
