"""The OCI Queue test server (``tests/oci/server.py``) started for tests, with its own API key and SDK config file.

Why a subprocess with a real key: code under test meets the server the way it would meet the cloud service, over
HTTP from its own process, reading credentials from an OCI config file and signing every request with the SDK's
signer. The server knows only the public half of a key made for this run, so a test can also prove that a request
signed with any other key is refused.

The server also trusts session tokens from a token issuer whose key the fixture makes: ``resource_principal_env``
mints one and returns the environment under which the SDK's ``get_resource_principals_signer()`` signs in with it,
as it does in OCI Functions or with OKE workload identity (resource principal version 2.2).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.oci.server import Modes, SignatureVerifier

REPO = Path(__file__).resolve().parents[2]
USER = "ocid1.user.oc1..test"
TENANCY = "ocid1.tenancy.oc1..test"
COMPARTMENT = "ocid1.compartment.oc1..test"
REGION = "us-ashburn-1"
#: The resource a resource principal session token is about: here a function, as in OCI Functions.
RESOURCE = "ocid1.fnfunc.oc1.iad.test"
#: How long a minted session token is valid (OCI's last 20 minutes to an hour; the tests need less).
TOKEN_LIFETIME = 3600
_LISTENING = re.compile(r"^OCI Queue test server listening on (http://127\.0\.0\.1:\d+), messages endpoints (.+)$")


def new_key() -> rsa.RSAPrivateKey:
    """An RSA 2048 key, the size OCI's API keys have."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def fingerprint(public_key: rsa.RSAPublicKey) -> str:
    """The API key fingerprint as OCI computes it: MD5 of the DER public key, as colon-separated hex pairs."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashlib.md5(der, usedforsecurity=False).hexdigest()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def write_key(path: Path, key: rsa.RSAPrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)
    return path


def _base64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwk(public_key: rsa.RSAPublicKey, kid: str) -> dict[str, str]:
    """An RSA public key as a JSON Web Key (RFC 7517), with the members OCI's tokens give it."""
    numbers = public_key.public_numbers()
    n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
    e = numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")
    return {"kid": kid, "n": _base64url(n), "e": _base64url(e), "kty": "RSA", "alg": "RS256", "use": "sig"}


def session_token(issuer: rsa.RSAPrivateKey, session_key: rsa.RSAPublicKey, *, lifetime: float = TOKEN_LIFETIME) -> str:
    """A resource principal session token (RPST) for ``session_key``, signed RS256 by ``issuer``.

    The claims are those of the RPST in Oracle's SDK tests (see tests/oci/server.py), for :data:`RESOURCE` in the
    test tenancy and compartment; ``jwk`` is the session's public key as a JSON string, as OCI writes it. A negative
    ``lifetime`` makes a token that has already expired.
    """
    now = int(time.time())
    header = {"kid": "test-issuer", "alg": "RS256"}
    claims = {
        "sub": RESOURCE,
        "iss": "authService.oracle.com",
        "aud": "oci",
        "ptype": "resource",
        "ttype": "res",
        "res_id": RESOURCE,
        "res_type": "fnfunc",
        "res_tenant": TENANCY,
        "res_compartment": COMPARTMENT,
        "tenant": TENANCY,
        "iat": now,
        "exp": now + int(lifetime),
        "jti": str(uuid.uuid4()),
        "jwk": json.dumps(_jwk(session_key, f"session-{uuid.uuid4().hex[:8]}"), separators=(",", ":")),
    }
    signed = ".".join(_base64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims))
    signature = issuer.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signed}.{_base64url(signature)}"


def write_config(path: Path, key_file: Path, key_fingerprint: str) -> Path:
    """An OCI SDK/CLI config file with one ``[DEFAULT]`` profile (read it with ``oci.config.from_file``)."""
    path.write_text(
        f"[DEFAULT]\nuser={USER}\nfingerprint={key_fingerprint}\nkey_file={key_file}\ntenancy={TENANCY}\nregion={REGION}\n"
    )
    return path


class OciTestServer:
    """One ``python -m tests.oci.server`` process on a free loopback port, and the config file to reach it.

    ``start()`` makes the key pair and the config in ``workdir``, starts the server with the interpreter running the
    tests and waits for its ready line; ``stop()`` ends it. Also a context manager. ``modes`` are the server's
    answers where the API reference is silent (:class:`tests.oci.server.Modes`; by default the ones harder on a
    client).
    """

    def __init__(self, workdir: Path, modes: Modes | None = None) -> None:
        self.workdir = workdir
        self.modes = modes or Modes()
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self._endpoint: str | None = None
        self._cells: list[str] = []
        self._fingerprint: str | None = None
        #: Signs the session tokens the server accepts (the server knows its public half).
        self._issuer: rsa.RSAPrivateKey | None = None
        self._ready = threading.Event()

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: the control plane's endpoint, and the first cell's messages endpoint."""
        if self._endpoint is None:
            raise RuntimeError("the OCI test server is not started")
        return self._endpoint

    @property
    def messages_endpoints(self) -> list[str]:
        """Every cell's messages endpoint: queues are placed on them in turn (a queue's is its ``messagesEndpoint``)."""
        if not self._cells:
            raise RuntimeError("the OCI test server is not started")
        return self._cells

    @property
    def config_file(self) -> Path:
        return self.workdir / "config"

    @property
    def compartment_id(self) -> str:
        """Any compartment OCID works here; this is the one the tests use."""
        return COMPARTMENT

    @property
    def faults_file(self) -> Path:
        """The server's ``--faults`` file: what :meth:`fault` scripts."""
        return self.workdir / "faults.json"

    def fault(
        self,
        operation: str,
        status: int,
        code: str,
        *,
        times: int = 1,
        done: bool = False,
        retry_after: float | None = None,
        message: str | None = None,
    ) -> None:
        """Script the next ``times`` requests to ``operation`` (a route's name, e.g. ``put_messages``) to be answered
        ``status``/``code``, after doing the work when ``done``, with ``retry-after`` when given."""
        self._add_fault(
            {
                "operation": operation,
                "status": status,
                "code": code,
                "times": times,
                "done": done,
                "retryAfter": retry_after,
                "message": message,
            }
        )

    def omit(self, operation: str, *fields: str, times: int = 1) -> None:
        """Script the next ``times`` answers to ``operation`` to come without ``fields`` of their JSON body."""
        self._add_fault({"operation": operation, "omit": list(fields), "times": times})

    def _add_fault(self, entry: dict[str, Any]) -> None:
        entries = json.loads(self.faults_file.read_text()) if self.faults_file.exists() else []
        self._write_faults([*entries, {"id": uuid.uuid4().hex, **entry}])

    def clear_faults(self) -> None:
        """Drop every scripted fault not yet met."""
        self._write_faults([])

    def _write_faults(self, entries: list[dict[str, Any]]) -> None:
        partial = self.faults_file.with_name(self.faults_file.name + ".partial")
        partial.write_text(json.dumps(entries))
        partial.replace(self.faults_file)  # the server never reads half a file

    @property
    def stderr_file(self) -> Path:
        return self.workdir / "server.stderr"

    def start(self, timeout: float = 30) -> OciTestServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        key = new_key()
        key_file = write_key(self.workdir / "oci_api_key.pem", key)
        public_file = self.workdir / "oci_api_key_public.pem"
        public_file.write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        self._fingerprint = fingerprint(key.public_key())
        write_config(self.config_file, key_file, self._fingerprint)
        self._issuer = new_key()
        issuer_file = self.workdir / "token_issuer_public.pem"
        issuer_file.write_bytes(
            self._issuer.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        with self.stderr_file.open("w") as stderr:  # a file, not a pipe: nothing has to drain it
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.oci.server",
                    "--port",
                    "0",
                    "--public-key",
                    str(public_file),
                    "--tenancy",
                    TENANCY,
                    "--user",
                    USER,
                    "--fingerprint",
                    self._fingerprint,
                    "--token-issuer-key",
                    str(issuer_file),
                    "--ready-file",
                    str(self.workdir / "ready"),
                    "--stale-receipt",
                    self.modes.stale_receipt,
                    "--retention-bound",
                    self.modes.retention_bound,
                    "--put-answer",
                    self.modes.put_answer,
                    "--other-cell",
                    self.modes.other_cell,
                    "--hung-up-poll",
                    self.modes.hung_up_poll,
                    "--faults",
                    str(self.faults_file),
                ],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        threading.Thread(target=self._read, daemon=True, name="oci-test-server-stdout").start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the OCI test server did not listen within {timeout} s:\n{self._stderr()}")
        if self._endpoint is None:
            self.stop()
            raise RuntimeError(f"the OCI test server exited with {self.proc.returncode}:\n{self._stderr()}")
        return self

    def stop(self, timeout: float = 10) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def wrong_key_config(self, workdir: Path) -> Path:
        """A config with the right user, tenancy and fingerprint but another key: what a signature check must catch."""
        if self._fingerprint is None:
            raise RuntimeError("the OCI test server is not started")
        key_file = write_key(workdir / "wrong_oci_api_key.pem", new_key())
        return write_config(workdir / "wrong_key_config", key_file, self._fingerprint)

    def session_token(self, session_key: rsa.RSAPublicKey, *, valid: bool = True, lifetime: float = TOKEN_LIFETIME) -> str:
        """A session token for ``session_key`` from this server's issuer, or (``valid=False``) from another one."""
        if self._issuer is None:
            raise RuntimeError("the OCI test server is not started")
        return session_token(self._issuer if valid else new_key(), session_key, lifetime=lifetime)

    def token_verifier(self, **kwargs: Any) -> SignatureVerifier:
        """A verifier of requests signed with this server's session tokens only, as the services a signer asks for
        its token check the caller (``kwargs``: :class:`SignatureVerifier`'s, e.g. ``always``)."""
        if self._issuer is None:
            raise RuntimeError("the OCI test server is not started")
        return SignatureVerifier(None, None, self._issuer.public_key(), **kwargs)

    def session_profile(self, workdir: Path, profile: str = "SESSION") -> Path:
        """A config file with one session profile, as ``oci session authenticate`` writes it: no ``user``, the
        session's key in ``key_file`` and its token in ``security_token_file`` (in ``workdir``/sessions/PROFILE)."""
        folder = workdir / "sessions" / profile
        folder.mkdir(parents=True, exist_ok=True)
        key = new_key()
        key_file = write_key(folder / "oci_api_key.pem", key)
        token_file = folder / "token"
        self.write_session_token(token_file)
        config = workdir / "session_config"
        config.write_text(
            f"[{profile}]\nfingerprint={fingerprint(key.public_key())}\nkey_file={key_file}\n"
            f"tenancy={TENANCY}\nregion={REGION}\nsecurity_token_file={token_file}\n"
        )
        return config

    def write_session_token(self, token_file: Path, *, valid: bool = True) -> None:
        """Write a token for the session key beside ``token_file`` into it, in place, as ``oci session refresh``
        does (``valid=False``: from another issuer)."""
        key = serialization.load_pem_private_key((token_file.parent / "oci_api_key.pem").read_bytes(), None)
        assert isinstance(key, rsa.RSAPrivateKey)
        token_file.write_text(self.session_token(key.public_key(), valid=valid))

    def resource_principal_env(
        self, workdir: Path, *, valid: bool = True, lifetime: float = TOKEN_LIFETIME
    ) -> dict[str, str]:
        """The environment of a resource principal (version 2.2) that signs in to this server.

        Writes a new session key (``rp_private.pem``) and a token for it (``rpst``) into ``workdir`` and returns
        the variables ``oci.auth.signers.get_resource_principals_signer()`` reads. The token and key are given as
        absolute paths, as OCI Functions gives them (the SDK reads the files, and reads them again after a 401);
        with ``valid=False`` the token comes from another issuer, so every request is refused with 401.
        """
        workdir.mkdir(parents=True, exist_ok=True)
        write_key(workdir / "rp_private.pem", new_key())
        env = {
            "OCI_RESOURCE_PRINCIPAL_VERSION": "2.2",
            "OCI_RESOURCE_PRINCIPAL_RPST": str((workdir / "rpst").resolve()),
            "OCI_RESOURCE_PRINCIPAL_PRIVATE_PEM": str((workdir / "rp_private.pem").resolve()),
            "OCI_RESOURCE_PRINCIPAL_REGION": REGION,
        }
        self.renew_resource_principal_token(env, valid=valid, lifetime=lifetime)
        return env

    def renew_resource_principal_token(
        self, env: dict[str, str], *, valid: bool = True, lifetime: float = TOKEN_LIFETIME
    ) -> None:
        """Replace the token of ``resource_principal_env``'s files with a new one for the same key, as the platform
        does before the old one expires (``valid=False``: from another issuer, a rotation gone wrong)."""
        key = serialization.load_pem_private_key(Path(env["OCI_RESOURCE_PRINCIPAL_PRIVATE_PEM"]).read_bytes(), None)
        assert isinstance(key, rsa.RSAPrivateKey)
        token_file = Path(env["OCI_RESOURCE_PRINCIPAL_RPST"])
        partial = token_file.with_name(token_file.name + ".partial")
        partial.write_text(self.session_token(key.public_key(), valid=valid, lifetime=lifetime))  # no newline: the
        partial.replace(token_file)  # SDK would keep it in the keyId; and a reader never sees half a token

    def move_queues(self) -> None:
        """Move every queue to the next cell's messages endpoint (the server's SIGUSR1); returns once GetQueue
        says so."""
        import oci

        assert self.proc is not None
        admin = oci.queue.QueueAdminClient(oci.config.from_file(str(self.config_file)), service_endpoint=self.endpoint)
        before = {q.id: q.messages_endpoint for q in admin.list_queues(compartment_id=self.compartment_id).data.items}
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while any(admin.get_queue(queue_id).data.messages_endpoint == endpoint for queue_id, endpoint in before.items()):
            if time.monotonic() > deadline:
                raise RuntimeError("the OCI test server did not move its queues within 10 s")
            time.sleep(0.02)

    def set_delivery_limit(self, queue: str, limit: int) -> None:
        """Set a queue's deadLetterQueueDeliveryCount as an operator would, with the SDK's admin client."""
        import oci

        admin = oci.queue.QueueAdminClient(oci.config.from_file(str(self.config_file)), service_endpoint=self.endpoint)
        [found] = admin.list_queues(
            compartment_id=self.compartment_id, display_name=queue, lifecycle_state="ACTIVE"
        ).data.items
        admin.update_queue(found.id, oci.queue.models.UpdateQueueDetails(dead_letter_queue_delivery_count=limit))

    def allow_large_messages(self, queue: str) -> None:
        """Give a queue the LARGE_MESSAGES capability as an operator would (UpdateQueue, the SDK's admin client)."""
        import oci

        admin = oci.queue.QueueAdminClient(oci.config.from_file(str(self.config_file)), service_endpoint=self.endpoint)
        [found] = admin.list_queues(
            compartment_id=self.compartment_id, display_name=queue, lifecycle_state="ACTIVE"
        ).data.items
        admin.update_queue(
            found.id, oci.queue.models.UpdateQueueDetails(capabilities=[oci.queue.models.LargeMessagesCapabilityDetails()])
        )

    def __enter__(self) -> OciTestServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _read(self) -> None:
        """Collect stdout; the ready line gives the endpoint. Set the event at EOF too, so a dead server is noticed."""
        assert self.proc is not None and self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                self.output.append(line)
                if self._endpoint is None and (match := _LISTENING.match(line.strip())):
                    self._endpoint, self._cells = match.group(1), match.group(2).split()
                    self._ready.set()
        except ValueError:  # stdout closed by stop()
            pass
        finally:
            self._ready.set()

    def _stderr(self) -> str:
        return self.stderr_file.read_text() if self.stderr_file.exists() else ""
