"""The two ends of a k3s join, as k3s does them, over real TLS: a server holding the
cluster's server CA, and an agent holding only its server URL and full token. The join
tests run them on 127.0.0.1; the boot tests' stand-in k3s runs them inside booted nodes.

The agent follows k3s (pkg/clientaccess/token.go): fetch /cacerts without verifying,
compare its sha256 with the token's hash, then talk to the server trusting only that
bundle, authenticating as `node` with the token's secret.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import ipaddress
import re
import ssl
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raya.identity import CertificateAuthority
from tests.support import http_server, routes


class JoinRefused(Exception):
    pass


def serving_certificate(
    ca: CertificateAuthority, folder: Path, address: str = "127.0.0.1"
) -> tuple[Path, Path]:
    """A serving certificate for `address` signed by `ca`, as k3s' dynamiclistener makes."""
    ca_key = serialization.load_pem_private_key(ca.key_pem.encode(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.encode())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k3s")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = folder / "serving.crt", folder / "serving.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def k3s_like_server(
    serving: tuple[Path, Path],
    cacerts: bytes,
    secret: str,
    address: tuple[str, int] = ("127.0.0.1", 0),
) -> contextlib.AbstractContextManager[str]:
    """HTTPS on `address`: /cacerts for anyone, /v1-k3s/config for `node:<secret>`."""
    expected = "Basic " + base64.b64encode(f"node:{secret}".encode()).decode()

    def config(request: BaseHTTPRequestHandler) -> tuple[int, bytes]:
        authorized = request.headers.get("Authorization") == expected
        return (200, b"welcome") if authorized else (401, b"Unauthorized")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*serving)
    return http_server(
        routes({"/cacerts": cacerts, "/v1-k3s/config": config}), tls=context, address=address
    )


def join(url: str, token: str) -> bytes:
    """What a k3s agent does with its server URL and full token; JoinRefused if it would not."""
    match = re.fullmatch(r"K10([0-9a-f]{64})::([^:]+):(.+)", token)
    if not match:
        raise JoinRefused("not a full token")
    ca_hash, secret = match[1], match[3]
    blind = ssl.create_default_context()
    blind.check_hostname = False
    blind.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"{url}/cacerts", context=blind, timeout=10) as response:
        cacerts: bytes = response.read()
    if hashlib.sha256(cacerts).hexdigest() != ca_hash:
        raise JoinRefused("token CA hash does not match the server's CA certificate hash")
    trusting = ssl.create_default_context(cadata=cacerts.decode())
    request = urllib.request.Request(f"{url}/v1-k3s/config")
    credentials = base64.b64encode(f"node:{secret}".encode()).decode()
    request.add_header("Authorization", f"Basic {credentials}")
    try:
        with urllib.request.urlopen(request, context=trusting, timeout=10) as response:
            body: bytes = response.read()
            return body
    except urllib.error.URLError as error:
        raise JoinRefused(str(error.reason)) from None
