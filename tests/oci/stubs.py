"""Stubs of the endpoints the SDK's signers ask for a session token, for the sign-ins that get theirs from OCI itself.

Why: an instance principal, a resource principal of version 3.0 and an OKE workload identity each get their session
token from a service of OCI that has no emulator (the instance metadata service and the auth service's X.509
federation, a parent resource's token endpoints, the cluster's proxymux). Each stub here answers in the shape the
SDK parses (the SDK file is named on each), checks the request as the service would (who signed it, what it
carries) and hands out a session token from the test server's issuer, so that the test server verifies every
request the worker then signs with it. ``valid = False`` makes a stub hand out a token from another issuer, which the
test server must refuse. Each stub keeps the requests it got, for the tests to look at.

The stubs run in the test process's threads. Some listen where the SDK alone decides the port (the proxymux's
12250, the auth service's 443): those take a loopback address of their own (:func:`bind_loopback`), and a worker
reaches them through names and files it sees in a mount namespace of its own (:func:`in_mount_namespace`).
"""

from __future__ import annotations

import base64
import datetime
import email.message
import errno
import ipaddress
import json
import random
import shlex
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from tests.oci.fixture import COMPARTMENT, REGION, TENANCY, OciTestServer, new_key
from tests.oci.server import ApiError, SignatureVerifier

#: The region's short name, as an older region's instance metadata gives it (the SDK maps it to :data:`REGION`).
REGION_KEY = "iad"
#: Where the SDK sends an instance principal's federation request in :data:`REGION`
#: (``oci.regions.endpoint_for("auth", REGION)`` and ``/v1/x509``, in ``instance_principals_security_token_signer.py``).
AUTH_HOST = f"auth.{REGION}.oraclecloud.com"
INSTANCE = "ocid1.instance.oc1.iad.test"


@dataclass(frozen=True)
class Request:
    """One request a stub got: the target as sent (path and query), its headers and body."""

    method: str
    target: str
    headers: email.message.Message
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


#: What a stub answers: status, content type and body.
Answer = tuple[int, str, bytes]


def json_answer(value: Any, status: int = 200) -> Answer:
    return status, "application/json", json.dumps(value).encode()


def error_answer(error: ApiError) -> Answer:
    """An error in the ``{"code", "message"}`` shape every OCI service answers (the SDK puts both in its ServiceError)."""
    return json_answer({"code": error.code, "message": error.message}, error.status)


class Stub:
    """An HTTP server (HTTPS with ``tls``) in this process's threads, answering every request with ``answer``."""

    def __init__(
        self, answer: Callable[[Request], Answer], server: ThreadingHTTPServer, tls: TlsIdentity | None = None
    ) -> None:
        self.answer = answer
        self.requests: list[Request] = []
        self.server = server
        self.tls = tls
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                request = Request(self.command, self.path, self.headers, body)
                stub.requests.append(request)
                status, kind, payload = stub.answer(request)
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                self.send_header("opc-request-id", uuid.uuid4().hex)
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _serve

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                """Quiet: the tests read ``requests``."""

        server.RequestHandlerClass = Handler
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls.cert_file, tls.key_file)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True, name=f"stub-{self.host}:{self.port}"
        )
        self._thread.start()

    @property
    def host(self) -> str:
        return str(self.server.server_address[0])

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()

    def __enter__(self) -> Stub:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def bind_loopback(port: int, attempts: int = 50) -> ThreadingHTTPServer:
    """A server bound to ``port`` on a loopback address that nothing else listens on with that port.

    Linux routes all of 127.0.0.0/8 to loopback; a fixed port (the SDK's) is shared by every test process on the
    machine, so each takes an address of 127.12.x.y at random until one is free. OSError when none is (or when this
    process may not bind the port at all).
    """
    for _ in range(attempts):
        host = f"127.12.{random.randint(0, 255)}.{random.randint(1, 254)}"
        try:
            return ThreadingHTTPServer((host, port), BaseHTTPRequestHandler)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, f"no loopback address had port {port} free in {attempts} tries")


def _name(common_name: str, *units: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            *(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit) for unit in units),
        ]
    )


def _certificate(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: x509.Name,
    issuer_key: rsa.RSAPrivateKey,
    *,
    ca: bool,
    names: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def armourless(data: bytes) -> str:
    """A PEM certificate or public key as the SDK sends one: base64 of the DER, no armour lines nor newlines
    (``oci/auth/auth_utils.py``, ``sanitize_certificate_string``)."""
    return "".join(line for line in data.decode().splitlines() if not line.startswith("-----"))


@dataclass(frozen=True)
class TlsIdentity:
    """A server certificate for ``names`` from a CA of its own: ``ca_file`` is what a client must trust."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    @classmethod
    def make(cls, folder: Path, names: list[x509.GeneralName]) -> TlsIdentity:
        folder.mkdir(parents=True, exist_ok=True)
        ca_key, key = new_key(), new_key()
        ca_name = _name("test cluster CA")
        ca = _certificate(ca_name, ca_key, ca_name, ca_key, ca=True)
        leaf = _certificate(_name("test endpoint"), key, ca_name, ca_key, ca=False, names=names)
        (folder / "ca.crt").write_bytes(pem(ca))
        (folder / "tls.crt").write_bytes(pem(leaf))
        (folder / "tls.key").write_bytes(key_pem(key))
        return cls(folder / "ca.crt", folder / "tls.crt", folder / "tls.key")


def unauthenticated(why: str) -> Answer:
    return error_answer(ApiError(401, "NotAuthenticated", why))


def bad_request(why: str) -> Answer:
    return error_answer(ApiError(400, "InvalidParameter", why))


def _public_key(armoured: Any) -> rsa.RSAPublicKey:
    """A public key sent as the SDK sends one (:func:`armourless`); ValueError if it is not an RSA key."""
    if not isinstance(armoured, str):
        raise ValueError("not a string")
    key = serialization.load_der_public_key(base64.b64decode(armoured, validate=True))
    if not isinstance(key, rsa.RSAPublicKey):
        raise ValueError("not an RSA key")
    return key


def signed_jwt(claims: dict[str, Any], key: rsa.RSAPrivateKey) -> str:
    """A JWT signed RS256 by ``key``."""

    def part(value: bytes) -> str:
        return base64.urlsafe_b64encode(value).rstrip(b"=").decode()

    signed = ".".join(part(json.dumps(v, separators=(",", ":")).encode()) for v in ({"alg": "RS256"}, claims))
    return f"{signed}.{part(key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256()))}"


class Proxymux:
    """The proxymux endpoint of an OKE enhanced cluster, which exchanges a pod's service account token for a resource
    principal session token, as ``oci/auth/signers/oke_workload_identity_resource_principal_signer.py`` calls it.

    The SDK posts ``{"podKey": <its session public key>}`` to ``https://$KUBERNETES_SERVICE_HOST:12250/
    resourcePrincipalSessionTokens`` with ``Authorization: Bearer <the pod's service account token>``, a JSON content
    type and an ``opc-request-id``, trusting the cluster CA (the service account's ``ca.crt``); it base64-decodes the
    answer's body, reads it as JSON and takes ``token`` without its first three characters (``ST$``). The stub
    accepts only the service account token it was made with (the real one asks the cluster's API server) and refuses
    a request of another shape.
    """

    PORT = 12250
    PATH = "/resourcePrincipalSessionTokens"

    def __init__(self, issuer: OciTestServer, folder: Path) -> None:
        self.issuer = issuer
        self.valid = True
        cluster_key = new_key()
        now = int(time.time())
        #: A projected service account token's claims (the SDK reads ``exp`` only, refusing an expired token).
        self.service_account_token = signed_jwt(
            {
                "iss": "https://kubernetes.default.svc.cluster.local",
                "aud": ["https://kubernetes.default.svc"],
                "sub": "system:serviceaccount:queues:worker",
                "iat": now,
                "nbf": now,
                "exp": now + 3600,
            },
            cluster_key,
        )
        server = bind_loopback(self.PORT)
        host = str(server.server_address[0])
        self.tls = TlsIdentity.make(folder, [x509.IPAddress(ipaddress.ip_address(host))])
        self.stub = Stub(self.answer, server, self.tls)

    def answer(self, request: Request) -> Answer:
        if (request.method, request.target) != ("POST", self.PATH):
            return error_answer(ApiError(404, "NotFound", f"no {request.method} {request.target} here"))
        if request.headers.get("authorization") != f"Bearer {self.service_account_token}":
            return unauthenticated("the bearer token is not this pod's service account token")
        if request.headers.get("content-type") != "application/json" or not request.headers.get("opc-request-id"):
            return bad_request("a token request is JSON and carries an opc-request-id")
        try:
            body = request.json()
            if not isinstance(body, dict) or set(body) != {"podKey"}:
                raise ValueError(f"the body is {body!r}")
            key = _public_key(body["podKey"])
        except ValueError as exc:
            return bad_request(f'the body is not {{"podKey": <RSA public key>}}: {exc}')
        token = json.dumps({"token": "ST$" + self.issuer.session_token(key, valid=self.valid)})
        return 200, "application/json", base64.b64encode(token.encode())

    def close(self) -> None:
        self.stub.close()


class ParentResource:
    """The endpoints a resource principal of version 3.0 gets its parent resource's session token from, as
    ``oci/auth/signers/nested_resource_principals_signer.py`` calls them, signing each with the leaf resource's
    session token (here a version 2.2 leaf).

    ``GET $OCI_RESOURCE_PRINCIPAL_RPT_URL_FOR_PARENT_RESOURCE`` answers ``{"resourcePrincipalToken",
    "servicePrincipalSessionToken"}`` (opaque to the SDK, passed on as they are; no ``opc-parent-rpt-url`` header, so
    the parent is the last); ``POST $OCI_RESOURCE_PRINCIPAL_RPST_ENDPOINT_FOR_PARENT_RESOURCE/v1/
    resourcePrincipalSessionToken`` with those two and ``sessionPublicKey`` answers ``{"token": <RPST>}``. Both
    check the caller's signature against the test server's issuer, as every OCI service checks a signed request.
    """

    RPST_PATH = "/v1/resourcePrincipalSessionToken"

    def __init__(self, issuer: OciTestServer, rpt_path: str = "/") -> None:
        self.issuer = issuer
        #: Where the parent's resource principal token is served (the URL's path; "/" for none).
        self.rpt_path = rpt_path
        self.valid = True
        self.verifier = issuer.token_verifier()
        self.rpt = f"rpt-{uuid.uuid4().hex}"
        self.spst = f"spst-{uuid.uuid4().hex}"
        self.stub = Stub(self.answer, ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler))

    @property
    def rpt_url(self) -> str:
        return self.stub.url + (self.rpt_path if self.rpt_path != "/" else "")

    def answer(self, request: Request) -> Answer:
        try:
            self.verifier.verify(request.method, request.target, request.headers, request.body)
        except ApiError as exc:
            return error_answer(exc)
        if (request.method, request.target) == ("GET", self.rpt_path):
            return json_answer({"resourcePrincipalToken": self.rpt, "servicePrincipalSessionToken": self.spst})
        if (request.method, request.target) != ("POST", self.RPST_PATH):
            return error_answer(ApiError(404, "NotFound", f"no {request.method} {request.target} here"))
        try:
            body = request.json()
            if not isinstance(body, dict) or set(body) != {
                "resourcePrincipalToken",
                "servicePrincipalSessionToken",
                "sessionPublicKey",
            }:
                raise ValueError(f"the body's fields are {sorted(body) if isinstance(body, dict) else body!r}")
            key = _public_key(body["sessionPublicKey"])
        except ValueError as exc:
            return bad_request(f"not a session token request: {exc}")
        if (body["resourcePrincipalToken"], body["servicePrincipalSessionToken"]) != (self.rpt, self.spst):
            return unauthenticated("the resource principal token is not the one this parent gave")
        return json_answer({"token": self.issuer.session_token(key, valid=self.valid)})

    def close(self) -> None:
        self.stub.close()


class InstanceIdentity:
    """A compute instance's identity as its metadata service and the auth service's X.509 federation serve it, for
    ``oci/auth/signers/instance_principals_security_token_signer.py`` and ``oci/auth/federation_client.py``.

    The metadata service (IMDS v2, plain HTTP at ``$OCI_METADATA_BASE_URL``) answers ``GET /instance/region`` and
    ``GET /identity/cert.pem``, ``key.pem`` and ``intermediate.pem`` only with ``Authorization: Bearer Oracle``: the
    instance's leaf certificate (its subject carries ``opc-tenant:<tenancy OCID>``, where the SDK reads the
    tenancy), the leaf's private key and the intermediate CA that issued it.

    The federation endpoint (``POST https://auth.<region>.oraclecloud.com/v1/x509``) takes ``{"certificate",
    "intermediateCertificates", "publicKey"}`` signed with the leaf's key under keyId
    ``<tenancy>/fed-x509/<SHA-1 fingerprint of the leaf>`` (date, request target and the body's headers; not host),
    and answers ``{"token": <session token for publicKey>}``. The stub checks the signature, and that the certificates
    are the leaf and intermediate this metadata service serves.
    """

    def __init__(self, issuer: OciTestServer, folder: Path) -> None:
        self.issuer = issuer
        self.valid = True
        intermediate_key, self.leaf_key = new_key(), new_key()
        root_key = new_key()
        root_name = _name("test PKI root")
        intermediate_name = _name("test PKI intermediate")
        self.intermediate = _certificate(intermediate_name, intermediate_key, root_name, root_key, ca=True)
        self.leaf = _certificate(
            _name(
                INSTANCE,
                "opc-certtype:instance",
                f"opc-compartment:{COMPARTMENT}",
                f"opc-instance:{INSTANCE}",
                f"opc-tenant:{TENANCY}",
            ),
            self.leaf_key,
            intermediate_name,
            intermediate_key,
            ca=False,
        )
        fingerprint = ":".join(f"{b:02X}" for b in self.leaf.fingerprint(hashes.SHA1()))  # noqa: S303 - OCI's keyId
        self.federation_verifier = SignatureVerifier(
            f"{TENANCY}/fed-x509/{fingerprint}", self.leaf.public_key(), always=("date", "(request-target)")
        )
        self.metadata = Stub(self.metadata_answer, ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler))
        server = bind_loopback(443)
        self.tls = TlsIdentity.make(folder, [x509.DNSName(AUTH_HOST)])
        self.federation = Stub(self.federation_answer, server, self.tls)

    @property
    def metadata_url(self) -> str:
        """What ``OCI_METADATA_BASE_URL`` names on an instance: the v2 metadata root."""
        return f"{self.metadata.url}/opc/v2"

    def metadata_answer(self, request: Request) -> Answer:
        if request.headers.get("authorization") != "Bearer Oracle":
            return unauthenticated("IMDS v2 needs Authorization: Bearer Oracle")
        files = {
            "/opc/v2/instance/region": REGION_KEY.encode(),
            "/opc/v2/identity/cert.pem": pem(self.leaf),
            "/opc/v2/identity/key.pem": key_pem(self.leaf_key),
            "/opc/v2/identity/intermediate.pem": pem(self.intermediate),
        }
        if request.method != "GET" or request.target not in files:
            return error_answer(ApiError(404, "NotFound", f"no {request.method} {request.target} here"))
        return 200, "text/plain", files[request.target]

    def federation_answer(self, request: Request) -> Answer:
        if (request.method, request.target) != ("POST", "/v1/x509"):
            return error_answer(ApiError(404, "NotFound", f"no {request.method} {request.target} here"))
        try:
            self.federation_verifier.verify(request.method, request.target, request.headers, request.body)
        except ApiError as exc:
            return error_answer(exc)
        try:
            body = request.json()
            if not isinstance(body, dict) or set(body) != {"certificate", "intermediateCertificates", "publicKey"}:
                raise ValueError(f"the body's fields are {sorted(body) if isinstance(body, dict) else body!r}")
            key = _public_key(body["publicKey"])
        except ValueError as exc:
            return bad_request(f"not an X.509 federation request: {exc}")
        if (body["certificate"], body["intermediateCertificates"]) != (
            armourless(pem(self.leaf)),
            [armourless(pem(self.intermediate))],
        ):
            return unauthenticated("the certificates are not this instance's")
        return json_answer({"token": self.issuer.session_token(key, valid=self.valid)})

    def close(self) -> None:
        self.metadata.close()
        self.federation.close()


def in_mount_namespace(binds: dict[str, Path]) -> tuple[str, ...]:
    """A command prefix that runs a program in a mount namespace of its own, where each target path shows the file
    or folder bound on it: the program finds a pod's or an instance's files where the SDK reads them (a service
    account under /var/run/secrets, a name in /etc/hosts), and nothing else on the machine sees them.

    ``unshare`` execs the shell and the shell execs the program, so the program keeps the pid it was started with.
    """
    mounts = " && ".join(
        f"mount --bind {shlex.quote(str(source))} {shlex.quote(target)}" for target, source in binds.items()
    )
    return ("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", f'{mounts} && exec "$@"', "sh")


def mount_namespaces_refused() -> str | None:
    """Why this process may not run a program in a mount namespace of its own (it needs root), or None."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            done = subprocess.run(
                [*in_mount_namespace({folder: Path(folder)}), "true"], capture_output=True, text=True, timeout=30
            )
        except FileNotFoundError:
            return "unshare is not installed"
    return None if done.returncode == 0 else f"unshare --mount failed: {done.stderr.strip()}"


def pod_files(folder: Path, proxymux: Proxymux) -> Path:
    """A /run as a pod of an OKE cluster has it: the service account's token and the cluster CA in
    ``secrets/kubernetes.io/serviceaccount`` (the SDK's defaults, ``oci/auth/signers/resource_principals_signer.py``
    and ``oci/auth/rpt_path_providers.py``)."""
    account = folder / "secrets" / "kubernetes.io" / "serviceaccount"
    account.mkdir(parents=True)
    (account / "token").write_text(proxymux.service_account_token)
    (account / "ca.crt").write_bytes(proxymux.tls.ca_file.read_bytes())
    return folder


def hosts_file(path: Path, names: dict[str, str]) -> Path:
    """An /etc/hosts with localhost and ``names`` (name: address)."""
    path.write_text("127.0.0.1 localhost\n" + "".join(f"{address} {name}\n" for name, address in names.items()))
    return path
