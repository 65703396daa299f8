"""Signing in to OCI Queue: the SDK config and signer for a connection's ``auth``, and the clients' settings.

Everything here blocks: it reads key files, or asks a metadata service or the platform for a token.
So the backend calls it once, in one of its threads.
The SDK's own retries and circuit breaker are off: the shared retry policy applies.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import oci

from worker.backends.failures import CONNECT_TIMEOUT, first_line
from worker.backends.oci.connection import OciConnection
from worker.backends.oci.errors import describe, is_transient
from worker.backends.queues import QueueError

#: Who each sign-in that needs no profile is, for messages.
_PRINCIPALS = {
    "instance_principal": "an instance principal",
    "resource_principal": "a resource principal",
    "oke_workload_identity": "an OKE workload identity",
}


class SessionTokenSigner(oci.auth.signers.SecurityTokenSigner):
    """The SDK's signer for a session token (keyId ``ST$<token>``, signed with the session's key), reading the token
    file again whenever it changes: ``oci session refresh`` rewrites it in place, and a process that kept the first
    token would be refused once it expires."""

    def __init__(self, token_file: str, private_key: Any) -> None:
        self.token_file = token_file
        self._lock = threading.Lock()
        self._seen = self._stamp()
        super().__init__(self._read(), private_key)

    def __call__(self, request: Any, enforce_content_headers: bool = True) -> Any:
        stamp = self._stamp()
        if stamp != self._seen:
            with self._lock:
                if stamp != self._seen:
                    self.api_key = oci.auth.signers.security_token_signer.SECURITY_TOKEN_FORMAT_STRING.format(self._read())
                    self._basic_signer.reset_signer(self.api_key, self.private_key)
                    self._body_signer.reset_signer(self.api_key, self.private_key)
                    self._seen = stamp
        return super().__call__(request, enforce_content_headers)

    def _stamp(self) -> tuple[int, int]:
        info = os.stat(self.token_file)
        return info.st_mtime_ns, info.st_size

    def _read(self) -> str:
        with open(self.token_file, encoding="utf-8") as file:
            return file.read().strip()


def sign_in(connection: OciConnection) -> tuple[dict[str, Any], Any]:
    """The SDK config and signer of ``connection``'s identity; QueueError naming what is wrong (never a key).

    A failure the same attempt may get past later (the metadata service not answering) is raised as it is,
    for the retry policy.
    """
    auth = connection.auth
    if auth in _PRINCIPALS:
        try:
            if auth == "instance_principal":  # asks the instance metadata service, then the auth service
                signer = oci.auth.signers.InstancePrincipalsSecurityTokenSigner()
            elif auth == "resource_principal":  # reads the OCI_RESOURCE_PRINCIPAL_* variables the platform sets
                signer = oci.auth.signers.get_resource_principals_signer()
            else:  # the pod's service account token, exchanged at the cluster's proxymux endpoint
                signer = oci.auth.signers.get_oke_workload_identity_resource_principal_signer()
        except Exception as exc:
            if is_transient(exc):
                raise  # retried as any outage; a TransientError in the end
            cause = describe(exc) if isinstance(exc, oci.exceptions.ServiceError) else first_line(exc)
            raise QueueError(f"cannot sign in to OCI Queue as {_PRINCIPALS[auth]}: {type(exc).__name__}: {cause}") from None
        return {"region": signer.region}, signer
    path = os.path.expanduser(connection.config_file)
    profile = connection.profile
    try:
        config = oci.config.from_file(path, profile)
        if auth == "security_token":
            # What `oci session authenticate` writes: no user, a token file and the session's key.
            key = oci.signer.load_private_key_from_file(
                config["key_file"], oci.config.get_config_value_or_default(config, "pass_phrase")
            )
            signer = SessionTokenSigner(os.path.expanduser(config["security_token_file"]), key)
        elif "security_token_file" in config and "user" not in config:
            raise QueueError(
                f"profile {profile!r} of {path} is a session (security_token_file, as `oci session "
                "authenticate` writes it): sign in with auth=security_token"
            )
        else:
            oci.config.validate_config(config)
            signer = oci.signer.Signer(
                tenancy=config["tenancy"],
                user=config["user"],
                fingerprint=config["fingerprint"],
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
    if connection.auth == "api_key":
        return f"API key of profile {connection.profile} in {connection.config_file}"
    if connection.auth == "security_token":
        return f"session of profile {connection.profile} in {connection.config_file}"
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
