"""A k3s-style join over real TLS on 127.0.0.1, with the rendered CA and an agent's token.

The client follows the k3s agent (pkg/clientaccess/token.go): fetch /cacerts without
verifying, compare its sha256 with the token's hash, then talk to the server trusting only
that bundle, authenticating as `node` with the token's secret.
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
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raya.identity import CertificateAuthority, generate_example_secrets
from raya.render import RenderedNode
from tests.nodes.tools import ignition_files
from tests.support import http_server, routes

TLS = "/var/lib/rancher/k3s/server/tls"
CONFIG = "/etc/rancher/k3s/config.yaml"


class JoinRefused(Exception):
    pass


def serving_certificate(
    ca: CertificateAuthority, folder: Path, dns_names: Sequence[str] = ()
) -> tuple[Path, Path]:
    """A serving certificate for 127.0.0.1 (and `dns_names`, as k3s' `tls-san`) signed by
    `ca`, as k3s' dynamiclistener makes."""
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
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    *(x509.DNSName(name) for name in dns_names),
                ]
            ),
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
    serving: tuple[Path, Path], cacerts: bytes, secret: str
) -> contextlib.AbstractContextManager[str]:
    """HTTPS on 127.0.0.1: /cacerts for anyone, /v1-k3s/config for `node:<secret>`."""
    expected = "Basic " + base64.b64encode(f"node:{secret}".encode()).decode()

    def config(request: BaseHTTPRequestHandler) -> tuple[int, bytes]:
        authorized = request.headers.get("Authorization") == expected
        return (200, b"welcome") if authorized else (401, b"Unauthorized")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*serving)
    return http_server(routes({"/cacerts": cacerts, "/v1-k3s/config": config}), tls=context)


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


def _rendered_identity(rendered: dict[str, RenderedNode]) -> tuple[CertificateAuthority, str]:
    files = ignition_files(rendered["control-plane"].ignition)
    ca = CertificateAuthority(
        cert_pem=files[f"{TLS}/server-ca.crt"].decode(),
        key_pem=files[f"{TLS}/server-ca.key"].decode(),
    )
    return ca, yaml.safe_load(files[CONFIG])["token"]


def _agent_token(rendered: dict[str, RenderedNode], name: str) -> str:
    config = yaml.safe_load(ignition_files(rendered[name].ignition)[CONFIG])
    assert config["server"] == "https://10.0.1.10:6443"  # the control plane, privately
    return str(config["token"])


def test_an_agent_joins_the_control_plane_it_was_rendered_for(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    ca, secret = _rendered_identity(rendered)
    serving = serving_certificate(ca, tmp_path)
    with k3s_like_server(serving, ca.cert_pem.encode(), secret) as url:
        for name in ("agent-0", "agent-1", "agent-2"):
            assert join(url, _agent_token(rendered, name)) == b"welcome"


def test_a_server_with_another_ca_is_refused(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    _, secret = _rendered_identity(rendered)
    other = generate_example_secrets(()).server_ca
    token = _agent_token(rendered, "agent-0")
    serving = serving_certificate(other, tmp_path)
    # Serving its own CA: the hash in the token does not match.
    with (
        k3s_like_server(serving, other.cert_pem.encode(), secret) as url,
        pytest.raises(JoinRefused, match="hash does not match"),
    ):
        join(url, token)


def test_a_server_replaying_the_ca_without_its_key_is_refused(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    ca, secret = _rendered_identity(rendered)
    other = generate_example_secrets(()).server_ca
    serving = serving_certificate(other, tmp_path)
    # The right CA bytes at /cacerts, but a certificate it did not sign: TLS refuses it.
    with (
        k3s_like_server(serving, ca.cert_pem.encode(), secret) as url,
        pytest.raises(JoinRefused, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        join(url, _agent_token(rendered, "agent-0"))


def test_the_server_refuses_a_wrong_secret(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    ca, secret = _rendered_identity(rendered)
    serving = serving_certificate(ca, tmp_path)
    token = _agent_token(rendered, "agent-0")
    forged = token.rsplit(":", 1)[0] + ":" + "f" * 64
    with (
        k3s_like_server(serving, ca.cert_pem.encode(), secret) as url,
        pytest.raises(JoinRefused, match="Unauthorized"),
    ):
        join(url, forged)
