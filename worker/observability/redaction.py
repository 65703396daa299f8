"""The one redaction every channel the worker writes passes: log lines, spans, HTTP answers, CLI messages.

Secrets come in many forms and leave by many channels; one :func:`redact` hides a form everywhere.
Most are known by shape: account keys, SAS signatures, tokens, passwords in URLs, PEM keys.
Those without a shape (the endpoint token, AWS variables) are known by value (:func:`remember`).
Text with no word a shape begins with is not scanned, so a line costs little.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import quote

#: What stands in for a secret.
HIDDEN = "***"

#: Names whose value, after ``=`` or ``:`` (quoted or not), is a secret up to the next separator.
_NAMED = (
    r"X-Amz-Security-Token|X-Amz-Signature|X-Amz-Credential|AccountKey|SharedAccessSignature|SharedAccessKey|"
    r"aws_secret_access_key|aws_session_token|aws_security_token|SecretAccessKey|SessionToken|SecurityToken|"
    r"secret_access_key|session_token|security_token|key_content|pass_phrase|passphrase|password|"
    r"access_token|refresh_token|id_token|client_secret|api_key|"
    r"Signature|token|sig"
)
_SECRET = re.compile(
    # PEM private keys, whole or cut short
    r"(?P<pem>-----BEGIN [A-Z ]*PRIVATE KEY-----).*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)"
    # a name and its value: AccountKey=..., sig=..., ;token=..., 'X-Amz-Security-Token': b'...'
    rf"|(?<![\w-])(?P<key>{_NAMED})(?P<sep>\s*=\s*['\"]?\??|['\"]\s*:\s*(?:b?['\"])?)"
    r"(?!-----BEGIN)(?P<value>[^;&\s\"',)\]}<>]+)"
    # an Authorization header: its whole value (a scheme and its credentials, spaces included)
    r"|(?<![\w-])(?P<auth>(?:(?:Proxy-)?Authorization|X-Amz-Security-Token)['\"]?\s*[:=]\s*(?:b?['\"])?)"
    r"(?P<credentials>[^'\"\r\n]+)"
    # a SigV4 signature as botocore logs it on a line of its own ("Signature:" and the hex on the next line)
    r"|(?<![\w-])(?P<sigv4>Signature:\s*)[0-9a-f]{64}\b"
    # the password in a URL's userinfo: scheme://user:password@host
    r"|(?P<userinfo>\b[a-z][a-z0-9+.-]*://[^\s/@:'\"]*):(?P<password>[^\s/@'\"]+)@"
    # AWS access key ids: long-term (AKIA) and temporary (ASIA)
    r"|(?-i:\b(?P<aws>A(?:KIA|SIA))[A-Z0-9]{16}\b)"
    # JSON web tokens (an identity's access token, OCI's session token): a header and claims, base64url, signed
    r"|(?-i:\b(?P<jwt>eyJ)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)",
    re.IGNORECASE | re.DOTALL,
)

#: Text in which none of these appears (in lower case) holds no secret of a known shape: the scan is skipped. Every
#: name above holds one of the first seven; the others begin the other shapes.
_TRIGGERS = (
    "key",
    "sig",
    "token",
    "pass",
    "secret",
    "credential",
    "authorization",
    "@",
    "-----begin",
    "akia",
    "asia",
    "eyj",
)

#: The process's secrets that have no shape of their own, in every form they may take (as they are, URL-encoded).
_known: tuple[str, ...] = ()
#: Shorter values are not remembered: they would hide ordinary words (moto's tests sign with "testing").
MIN_REMEMBERED = 12
#: Environment variables that hold secrets without a recognisable shape.
SECRET_VARIABLES = (
    "WORKER_HTTP_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ACCESS_KEY_ID",
)


def _hide(match: re.Match[str]) -> str:
    if (key := match.group("key")) is not None:
        sep = match.group("sep")
        return f"{key}={HIDDEN}" if "=" in sep else f"{key}{sep}{HIDDEN}"
    if match.group("auth") is not None:
        return f"{match.group('auth')}{HIDDEN}"
    if match.group("sigv4") is not None:
        return f"{match.group('sigv4')}{HIDDEN}"
    if match.group("userinfo") is not None:
        return f"{match.group('userinfo')}:{HIDDEN}@"
    if match.group("pem") is not None:
        return f"{match.group('pem')}{HIDDEN}"
    if match.group("jwt") is not None:
        return f"eyJ{HIDDEN}"
    return f"{match.group('aws')}{HIDDEN}"


def redact(text: str) -> str:
    """``text`` with every secret the worker knows of replaced by ``***``."""
    for secret in _known:
        if secret in text:
            text = text.replace(secret, HIDDEN)
    lowered = text.lower()
    for trigger in _TRIGGERS:
        if trigger in lowered:
            return _SECRET.sub(_hide, text)
    return text


def redact_value(value: object) -> object:
    """``value`` without secrets: strings redacted, containers walked, other objects by the text their repr shows."""
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {k if not isinstance(k, str) else redact(k): redact_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_value(v) for v in value)
    shown = repr(value)  # what both log renderers print for an object that is not JSON
    redacted = redact(shown)
    return value if redacted == shown else redacted


def remember(*secrets: str | None) -> None:
    """Hide these values too, wherever they appear from now on (the endpoint token, once read).

    A process-wide fact, as the log configuration is: set at start, read by every channel.
    """
    global _known
    found = set(_known)
    for secret in secrets:
        if secret and len(secret.strip()) >= MIN_REMEMBERED:
            found.update({secret.strip(), quote(secret.strip(), safe="")})
    # Longest first: a value that holds another is replaced whole.
    _known = tuple(sorted(found, key=len, reverse=True))


def remember_environment(environ: Mapping[str, str]) -> None:
    """Hide the values of the environment's secret variables (:data:`SECRET_VARIABLES`)."""
    remember(*(environ.get(name) for name in SECRET_VARIABLES))
