"""Sign-in without the cloud, for identity-based connection tests: a TLS certificate for loopback and a token endpoint.

Azurite accepts bearer tokens over HTTPS only (``--oauth basic``); it checks a
token's lifetime, issuer and audience, not its signature. The token endpoint
speaks the App Service managed-identity protocol that azure-identity's
``ManagedIdentityCredential`` (and so ``DefaultAzureCredential``) uses when
``IDENTITY_ENDPOINT`` and ``IDENTITY_HEADER`` are set: until it is started,
sign-in fails as it does on a machine without a managed identity.
"""

from __future__ import annotations

import base64
import datetime
import http.server
import ipaddress
import json
import threading
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

#: The header value the worker must send, as App Service's IDENTITY_HEADER.
IDENTITY_HEADER = "test-identity-header"


def loopback_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (and its key), as PEM files in ``folder``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def storage_token(lifetime: int = 3600) -> str:
    """A JWT with the claims Azurite checks (storage audience, an Entra issuer, lifetime); the signature is not checked."""
    now = int(time.time())

    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    claims = {
        "aud": "https://storage.azure.com",
        "iss": "https://sts.windows.net/00000000-0000-0000-0000-000000000000/",
        "iat": now - 60,
        "nbf": now - 60,
        "exp": now + lifetime,
        "oid": "test-identity",
    }
    return f"{part({'typ': 'JWT', 'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


class TokenEndpoint:
    """An App Service managed-identity token endpoint on loopback, answering with :func:`storage_token`."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.requests = 0
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/msi/token"

    def start(self) -> TokenEndpoint:
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 -- http.server's name
                endpoint.requests += 1
                if self.headers.get("X-IDENTITY-HEADER") != IDENTITY_HEADER:
                    self.send_error(401, "missing X-IDENTITY-HEADER")
                    return
                body = json.dumps(
                    {
                        "access_token": storage_token(),
                        "expires_on": str(int(time.time()) + 3600),
                        "resource": "https://storage.azure.com",
                        "token_type": "Bearer",
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
