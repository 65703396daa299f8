"""OCI Queue connection strings, limits and capabilities; light to import (no SDK), for start-up checks.

``oci://<messages-endpoint-host>?compartment=<ocid>[&auth=...][&config=...][&profile=...][&adminEndpoint=<url>]``
``[&poison=service|host][&longPoll=<seconds>][&maxMessageBytes=<bytes>]``; ``oci+http://`` is for a test server.
docs/backends.md says what each parameter means.
``maxMessageBytes`` is a setting because no primary source states the service's limit.
A queue with ``LARGE_MESSAGES`` takes more, so an operator can correct the figure without a release.
The string holds paths and names, no secret; errors name keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from worker.backends.failures import ConnectionStringError
from worker.backends.queues import Capabilities, Limits

SCHEMES = ("oci", "oci+http")
#: Sign-ins by the names the OCI CLI's ``--auth`` and the SDKs give them. The first two read a profile of ``config``.
AUTH_KINDS = ("api_key", "security_token", "instance_principal", "resource_principal", "oke_workload_identity")
#: Sign-ins that read a profile of the config file.
PROFILE_AUTH = ("api_key", "security_token")
#: What earlier connection strings wrote for ``api_key``; still read.
AUTH_ALIASES = {"config": "api_key"}
POISON_MODES = ("service", "host")
#: Where the OCI CLI and SDKs keep API-key profiles.
DEFAULT_CONFIG_FILE = "~/.oci/config"

#: OCI Queue (API 20210201): 20 messages a GetMessages, visibility 0 s to 12 h in whole seconds, 256 KiB messages,
#: long polls up to 30 s, display names of 1-255 characters. Sources: the OCI CLI's code generated from the API's
#: spec states three of these (oracle/oci-cli, services/queue/src/oci_cli_queue/generated/queue_cli.py, 2023:
#: ``--visibility-in-seconds`` "the maximum is 43,200 (12 hours)", ``--timeout-in-seconds`` "the maximum is 30
#: seconds", and ``--limit`` "the minimum is 1 and the maximum is 32"), as does the OCI Java SDK's
#: GetMessagesRequest of that time; the SDK here (2.189.0) dropped the numbers from its docstrings. Receives ask
#: for at most 20, the figure the API reference pages were quoted with: valid under either maximum. For the 256 KiB
#: message limit no primary source was found (the SDK's ``PutMessagesDetailsEntry.content`` says only "The content
#: of the message"): it stays the figure of the API reference as tooling quoted it, the same as the test server's
#: table (``tests/oci/server.py``), which refuses a request past these as the service does; since it rests on no
#: primary source, a connection may set another (``maxMessageBytes=``, see the module's docstring).
#: The long poll used by default is 5 s, not the service's 30: a stop waits for a poll under way (see
#: :data:`RELEASE_WAIT`), and 5 s lets an idle worker stop within Docker's default 10 s grace.
OCI_LIMITS = Limits(
    max_batch=20,
    max_visibility=12 * 3600,
    max_message_bytes=256 * 1024,
    visibility_resolution=1.0,
    long_poll=5.0,
    name_pattern=re.compile(r"[A-Za-z0-9._-]{1,255}"),
    name_rule="1-255 letters, digits, '.', '_' and '-' (the queue's display name), or a queue OCID",
)
#: The longest long poll the service takes (GetMessages ``timeoutInSeconds``); ``longPoll=`` chooses up to it.
MAX_LONG_POLL = 30
#: What the backend's ``close`` waits beyond a long poll's whole wait for receives cancelled under way (at stop):
#: time to release what the poll brought (one UpdateMessages).
RELEASE_MARGIN = 3.0
#: Longest the backend's ``close`` waits at the default long poll.
RELEASE_WAIT = OCI_LIMITS.long_poll + RELEASE_MARGIN
OCI_CAPABILITIES = Capabilities(
    dead_letter=True,
    peek=False,
    message_options=False,
    creates_queues=False,
    new_receipt_on_update=False,
    updates_content=False,
    channels=True,
)


@dataclass(frozen=True)
class OciConnection:
    """Where an OCI queue service is and how to sign in to it."""

    messages_endpoint: str
    compartment_id: str
    auth: str = "api_key"
    config_file: str = DEFAULT_CONFIG_FILE
    profile: str = "DEFAULT"
    admin_endpoint: str | None = None
    poison: str = "service"
    #: Seconds a receive waits at the service for a message (0: none, the listener polls with back-off). It also
    #: bounds how much longer an idle worker takes to stop, since a poll under way is never walked away from.
    long_poll: int = int(OCI_LIMITS.long_poll)
    #: The largest content a put may carry (``maxMessageBytes=``; see the module's docstring).
    max_message_bytes: int = OCI_LIMITS.max_message_bytes

    @property
    def limits(self) -> Limits:
        """The service's limits as this connection uses them: its long poll and message size."""
        if (self.long_poll, self.max_message_bytes) == (OCI_LIMITS.long_poll, OCI_LIMITS.max_message_bytes):
            return OCI_LIMITS
        return replace(OCI_LIMITS, long_poll=float(self.long_poll), max_message_bytes=self.max_message_bytes)

    def describe(self) -> str:
        """For logs: the endpoint and how it signs in, never a key."""
        how = self.auth.replace("_", " ")
        if self.auth in PROFILE_AUTH:
            how = f"{how.replace('api key', 'API key')}, profile {self.profile}"
        return f"OCI Queue {self.messages_endpoint} ({how})"


def parse_oci_connection(text: str) -> OciConnection:
    """An :class:`OciConnection` from ``oci://...``; ConnectionStringError lists every key that is wrong."""
    parts = urlsplit(text.strip())
    if parts.scheme.lower() not in SCHEMES:
        raise ConnectionStringError(f"an OCI Queue connection starts with {' or '.join(s + '://' for s in SCHEMES)}")
    if not parts.hostname:
        raise ConnectionStringError("an OCI Queue connection names the messages endpoint: oci://<host>?compartment=...")
    query = {key: values[-1] for key, values in parse_qs(parts.query, keep_blank_values=True).items()}
    problems = []
    known = {"compartment", "auth", "config", "profile", "adminEndpoint", "poison", "longPoll", "maxMessageBytes"}
    if unknown := sorted(set(query) - known):
        problems.append(f"unknown keys {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    compartment = query.get("compartment", "")
    if not compartment:
        problems.append("compartment=<compartment OCID> is missing")
    auth = query.get("auth", "api_key")
    auth = AUTH_ALIASES.get(auth, auth)
    if auth not in AUTH_KINDS:
        problems.append(f"auth must be one of {', '.join(AUTH_KINDS)}")
    poison = query.get("poison", "service")
    if poison not in POISON_MODES:
        problems.append(f"poison must be one of {', '.join(POISON_MODES)}")
    long_poll = query.get("longPoll", str(int(OCI_LIMITS.long_poll)))
    if not (long_poll.isascii() and long_poll.isdigit() and int(long_poll) <= MAX_LONG_POLL):
        problems.append(f"longPoll must be whole seconds from 0 to {MAX_LONG_POLL}, got {long_poll!r}")
    max_bytes = query.get("maxMessageBytes", str(OCI_LIMITS.max_message_bytes))
    if not (max_bytes.isascii() and max_bytes.isdigit() and int(max_bytes) >= 1):
        problems.append(f"maxMessageBytes must be a whole number of bytes, at least 1, got {max_bytes!r}")
    if problems:
        raise ConnectionStringError("OCI Queue connection: " + "; ".join(problems))
    http = "http" if parts.scheme.lower() == "oci+http" else "https"
    return OciConnection(
        messages_endpoint=f"{http}://{parts.netloc}",
        compartment_id=compartment,
        auth=auth,
        config_file=str(Path(query.get("config") or DEFAULT_CONFIG_FILE)),
        profile=query.get("profile") or "DEFAULT",
        admin_endpoint=query.get("adminEndpoint") or None,
        poison=poison,
        long_poll=int(long_poll),
        max_message_bytes=int(max_bytes),
    )
