"""Amazon SQS connection strings, limits and capabilities; light to import (no SDK), for start-up checks.

``sqs://?region=<region>[&endpoint=<url>][&profile=<name>][&poison=host|service][&longPoll=<seconds>]``.
docs/backends.md says what each parameter means.
Without ``profile``, credentials come from botocore's own provider chain.
Without ``poison``, each queue decides: a redrive policy keeps poison at SQS, else ``<queue>-poison``.
``longPoll`` is ReceiveMessage's ``WaitTimeSeconds``, 0 to 20, 20 by default. The string holds no secret.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from worker.backends.failures import ConnectionStringError
from worker.backends.queues import Capabilities, Limits

SCHEME = "sqs"
POISON_MODES = ("host", "service")
#: Where poison goes when the connection does not say: by each queue's redrive policy.
BY_QUEUE = "auto"
#: ReceiveMessage's longest ``WaitTimeSeconds``.
MAX_LONG_POLL = 20
#: What the backend's ``close`` waits beyond a long poll's whole wait for receives cancelled under way (at stop):
#: time to release what the poll brought.
RELEASE_MARGIN = 5.0
#: A FIFO queue's name ends with this; its poison queue is a FIFO queue too (``orders-poison.fifo``).
FIFO_SUFFIX = ".fifo"

#: Amazon SQS (API 2012-11-05, botocore's service model): ReceiveMessage takes 1-10 messages
#: (``MaxNumberOfMessages``) and waits up to 20 s (``WaitTimeSeconds``); a visibility timeout is 0 s to 12 hours
#: in whole seconds, and ChangeMessageVisibility cannot take a message past 12 hours from its first receive
#: (the "12-hour cap"); a message is 1 byte to 1 MiB, 1,048,576 bytes (SendMessage's ``MessageBody``; its message
#: attributes count towards it); queue names are 1-80 letters, digits, '-' and '_', a FIFO queue's ending in
#: ".fifo" within the 80.
SQS_LIMITS = Limits(
    max_batch=10,
    max_visibility=12 * 3600,
    max_message_bytes=1024 * 1024,
    visibility_resolution=1.0,
    long_poll=float(MAX_LONG_POLL),
    name_pattern=re.compile(r"(?=.{1,80}\Z)[A-Za-z0-9_-]+(?:\.fifo)?"),
    name_rule="1-80 letters, digits, '-' and '_' (a FIFO queue's name ending in '.fifo')",
)
#: SQS has redrive policies (dead-letter queues) and message attributes; no peek (a look is a receive), no
#: per-message time to live (the queue's retention applies) nor content updates; ChangeMessageVisibility keeps the
#: receipt handle; CreateQueue is quick.
SQS_CAPABILITIES = Capabilities(
    dead_letter=True,
    peek=False,
    message_options=False,
    creates_queues=True,
    new_receipt_on_update=False,
    updates_content=False,
    channels=False,
    message_properties=True,
)


@dataclass(frozen=True)
class SqsConnection:
    """Which SQS region (or endpoint) and how to sign in to it."""

    region: str
    endpoint: str | None = None
    profile: str | None = None
    #: ``host``, ``service``, or :data:`BY_QUEUE` (not given).
    poison: str = BY_QUEUE
    long_poll: int = MAX_LONG_POLL

    def describe(self) -> str:
        """For logs: the region, the endpoint if one is named, and the profile; never a key."""
        where = f"Amazon SQS {self.region}" + (f" at {self.endpoint}" if self.endpoint else "")
        return where + (f" (profile {self.profile})" if self.profile else "")


def is_fifo(queue: str) -> bool:
    """Whether ``queue`` names a FIFO queue (SQS requires the suffix on every FIFO queue and forbids it elsewhere)."""
    return queue.endswith(FIFO_SUFFIX)


def parse_sqs_connection(text: str) -> SqsConnection:
    """An :class:`SqsConnection` from ``sqs://?region=...``; ConnectionStringError lists every key that is wrong."""
    parts = urlsplit(text.strip())
    if parts.scheme.lower() != SCHEME:
        raise ConnectionStringError("an Amazon SQS connection starts with sqs://")
    query = {key: values[-1] for key, values in parse_qs(parts.query, keep_blank_values=True).items()}
    problems = []
    known = {"region", "endpoint", "profile", "poison", "longPoll"}
    if unknown := sorted(set(query) - known):
        problems.append(f"unknown keys {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    if parts.netloc or parts.path not in ("", "/"):
        problems.append("the queues are named by the functions, not the connection: write sqs://?region=...")
    region = query.get("region", "")
    if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+", region):
        problems.append("region=<region> is missing or is not a region name (us-east-1)")
    endpoint = query.get("endpoint") or None
    if endpoint is not None and urlsplit(endpoint).scheme not in ("http", "https"):
        problems.append("endpoint must be an http:// or https:// URL")
    poison = query.get("poison", BY_QUEUE)
    if "poison" in query and poison not in POISON_MODES:
        problems.append(f"poison must be one of {', '.join(POISON_MODES)}")
    long_poll = query.get("longPoll", str(MAX_LONG_POLL))
    if not (long_poll.isascii() and long_poll.isdigit() and int(long_poll) <= MAX_LONG_POLL):
        problems.append(f"longPoll must be whole seconds from 0 to {MAX_LONG_POLL}, got {long_poll!r}")
    if problems:
        raise ConnectionStringError("Amazon SQS connection: " + "; ".join(problems))
    return SqsConnection(
        region=region, endpoint=endpoint, profile=query.get("profile") or None, poison=poison, long_poll=int(long_poll)
    )
