"""Signing in to OCI Queue: the SDK config and signer for a connection's ``auth``, and the clients' settings.

Everything here blocks (it reads key files, or asks the instance metadata
service or the platform's variables for a token), so the backend calls it in
one of its threads, once. The SDK's own retries and circuit breaker are off:
calls run under the retry policy every remote backend shares.
"""

from __future__ import annotations

import os
from typing import Any

import oci

from worker.backends.failures import CONNECT_TIMEOUT, first_line
from worker.backends.oci.connection import OciConnection
from worker.backends.oci.errors import describe, is_transient
from worker.backends.queues import QueueError


def sign_in(connection: OciConnection) -> tuple[dict[str, Any], Any]:
    """The SDK config and signer of ``connection``'s identity; QueueError naming what is wrong (never a key).

    A failure the same attempt may get past later (the metadata service not answering) is raised as it is,
    for the retry policy.
    """
    auth = connection.auth
    if auth in ("instance_principal", "resource_principal"):
        try:
            if auth == "instance_principal":  # asks the instance metadata service, then the auth service
                signer = oci.auth.signers.InstancePrincipalsSecurityTokenSigner()
            else:  # reads the OCI_RESOURCE_PRINCIPAL_* variables the platform sets
                signer = oci.auth.signers.get_resource_principals_signer()
        except Exception as exc:
            if is_transient(exc):
                raise  # retried as any outage; a TransientError in the end
            cause = describe(exc) if isinstance(exc, oci.exceptions.ServiceError) else first_line(exc)
            who = "an instance principal" if auth == "instance_principal" else "a resource principal"
            raise QueueError(f"cannot sign in to OCI Queue as {who}: {type(exc).__name__}: {cause}") from None
        return {"region": signer.region}, signer
    path = os.path.expanduser(connection.config_file)
    profile = connection.profile
    try:
        config = oci.config.from_file(path, profile)
        if oci.util.AUTHENTICATION_TYPE_FIELD_NAME in config:  # e.g. a session token (oci session authenticate)
            signer = oci.util.get_signer_from_authentication_type(config)
        else:
            oci.config.validate_config(config)
            signer = oci.signer.Signer(
                tenancy=config["tenancy"], user=config["user"], fingerprint=config["fingerprint"],
                private_key_file_location=config.get("key_file"),
                pass_phrase=oci.config.get_config_value_or_default(config, "pass_phrase"),
                private_key_content=config.get("key_content"),
            )
    except (oci.exceptions.ClientError, OSError, ValueError, KeyError, TypeError) as exc:
        # The SDK's messages name files, profiles and fields, never a key; ours too.
        raise QueueError(
            f"cannot sign in to OCI Queue with profile {profile!r} of {path}: {type(exc).__name__}: {first_line(exc)}"
        ) from None
    return config, signer


def identity(connection: OciConnection) -> str:
    """Who ``connection`` signs in as, for messages: never a key."""
    if connection.auth == "config":
        return f"API key of profile {connection.profile} in {connection.config_file}"
    return connection.auth.replace("_", " ")


def client_kwargs(signer: Any, long_poll: float) -> dict[str, Any]:
    """What every client of the backend is made with: the signer, no SDK retries, and a read timeout past the
    longest long poll (the service holds such a request for up to ``long_poll`` seconds)."""
    return {
        "signer": signer,
        "retry_strategy": oci.retry.NoneRetryStrategy(),
        "circuit_breaker_strategy": oci.circuit_breaker.NoCircuitBreakerStrategy(),
        "timeout": (CONNECT_TIMEOUT, long_poll + 10),
    }
