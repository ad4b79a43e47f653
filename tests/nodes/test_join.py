"""A k3s-style join over real TLS on 127.0.0.1, with the rendered CA and an agent's token.

The client follows the k3s agent (pkg/clientaccess/token.go): fetch /cacerts without
verifying, compare its sha256 with the token's hash, then talk to the server trusting only
that bundle, authenticating with the token's user and secret (`K10<hash>::<user>:<secret>`).

The server models k3s' authorization (k3s-io/k3s): pkg/daemons/control/deps/deps.go
`genUsers` writes two users, `node` in group `k3s:agent` with the agent token (`agent-token`,
else the server token's secret) and `server` in group `k3s:server` with the server token;
pkg/server/handlers/router.go serves /cacerts to anyone, the agent endpoints (/v1-k3s/config,
/v1-k3s/client-kubelet.crt, ...) to `k3s:agent`, and /v1-k3s/server-bootstrap (the cluster's
CA keys and datastore bootstrap data), /v1-k3s/token and /v1-k3s/encrypt/* only to
`k3s:server`; pkg/server/auth/auth.go answers 401 to a failed login and 403 to a user
without the role.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import hmac
import ipaddress
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


AGENT_PATHS = ("/v1-k3s/config", "/v1-k3s/client-kubelet.crt")
SERVER_PATHS = ("/v1-k3s/server-bootstrap", "/v1-k3s/token", "/v1-k3s/encrypt/status")


def k3s_like_server(
    serving: tuple[Path, Path], cacerts: bytes, server_secret: str, agent_secret: str
) -> contextlib.AbstractContextManager[str]:
    """HTTPS on 127.0.0.1 with k3s' two users and the roles its endpoints require."""
    users = {"server": (server_secret, "k3s:server"), "node": (agent_secret, "k3s:agent")}

    def guarded(role: str) -> Callable[[BaseHTTPRequestHandler], tuple[int, bytes]]:
        def respond(request: BaseHTTPRequestHandler) -> tuple[int, bytes]:
            header = request.headers.get("Authorization", "").removeprefix("Basic ")
            user, _, secret = base64.b64decode(header).decode().partition(":")
            if user not in users or not hmac.compare_digest(users[user][0], secret):
                return 401, b"not authorized"
            if users[user][1] != role:
                return 403, b"forbidden"
            return 200, f"welcome to {request.path}".encode()

        return respond

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*serving)
    endpoints: dict[str, bytes | Callable[[BaseHTTPRequestHandler], tuple[int, bytes]]] = {
        "/cacerts": cacerts,
        **{path: guarded("k3s:agent") for path in AGENT_PATHS},
        **{path: guarded("k3s:server") for path in SERVER_PATHS},
    }
    return http_server(routes(endpoints), tls=context)


def join(url: str, token: str, path: str = "/v1-k3s/config") -> bytes:
    """What a k3s agent does with its server URL and full token, then a GET of `path`;
    JoinRefused if the agent would not go on or the server refuses."""
    match = re.fullmatch(r"K10([0-9a-f]{64})::([^:]+):(.+)", token)
    if not match:
        raise JoinRefused("not a full token")
    ca_hash, user, secret = match[1], match[2], match[3]
    blind = ssl.create_default_context()
    blind.check_hostname = False
    blind.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"{url}/cacerts", context=blind, timeout=10) as response:
        cacerts: bytes = response.read()
    if hashlib.sha256(cacerts).hexdigest() != ca_hash:
        raise JoinRefused("token CA hash does not match the server's CA certificate hash")
    trusting = ssl.create_default_context(cadata=cacerts.decode())
    request = urllib.request.Request(f"{url}{path}")
    credentials = base64.b64encode(f"{user}:{secret}".encode()).decode()
    request.add_header("Authorization", f"Basic {credentials}")
    try:
        with urllib.request.urlopen(request, context=trusting, timeout=10) as response:
            body: bytes = response.read()
            return body
    except urllib.error.URLError as error:
        raise JoinRefused(str(error.reason)) from None


@dataclass(frozen=True)
class ControlPlane:
    """What the rendered control plane holds: its CA and the two secrets k3s is given."""

    ca: CertificateAuthority
    server_secret: str  # `token`
    agent_secret: str  # `agent-token`

    def server(
        self, folder: Path, ca: CertificateAuthority | None = None
    ) -> contextlib.AbstractContextManager[str]:
        """The fake k3s server, serving the rendered CA, with a certificate signed by `ca`
        (by default the rendered one)."""
        serving = serving_certificate(ca or self.ca, folder)
        return k3s_like_server(
            serving, self.ca.cert_pem.encode(), self.server_secret, self.agent_secret
        )


def _control_plane(rendered: dict[str, RenderedNode]) -> ControlPlane:
    files = ignition_files(rendered["control-plane"].ignition)
    config = yaml.safe_load(files[CONFIG])
    ca = CertificateAuthority(
        cert_pem=files[f"{TLS}/server-ca.crt"].decode(),
        key_pem=files[f"{TLS}/server-ca.key"].decode(),
    )
    return ControlPlane(ca, config["token"], config["agent-token"])


def _agent_token(rendered: dict[str, RenderedNode], name: str) -> str:
    config = yaml.safe_load(ignition_files(rendered[name].ignition)[CONFIG])
    assert config["server"] == "https://10.0.1.10:6443"  # the control plane, privately
    return str(config["token"])


def test_an_agent_joins_the_control_plane_it_was_rendered_for(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    with _control_plane(rendered).server(tmp_path) as url:
        for name in ("agent-0", "agent-1", "agent-2"):
            token = _agent_token(rendered, name)
            for path in AGENT_PATHS:
                assert join(url, token, path) == f"welcome to {path}".encode()


def test_an_agent_token_reaches_no_server_only_endpoint(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    control_plane = _control_plane(rendered)
    ca_hash = hashlib.sha256(control_plane.ca.cert_pem.encode()).hexdigest()
    # What the spec's `::server:` form would have handed every agent: all of it.
    server_token = f"K10{ca_hash}::server:{control_plane.server_secret}"
    agent_token = _agent_token(rendered, "agent-0")
    with control_plane.server(tmp_path) as url:
        for path in SERVER_PATHS:
            assert join(url, server_token, path) == f"welcome to {path}".encode()
            with pytest.raises(JoinRefused, match="Forbidden"):
                join(url, agent_token, path)
        # Nor does the agent secret pass for the server user's.
        as_server = agent_token.replace("::node:", "::server:")
        with pytest.raises(JoinRefused, match="Unauthorized"):
            join(url, as_server, "/v1-k3s/server-bootstrap")


def test_a_server_with_another_ca_is_refused(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    control_plane = _control_plane(rendered)
    other = generate_example_secrets(()).server_ca
    serving = serving_certificate(other, tmp_path)
    # Serving its own CA: the hash in the token does not match.
    with (
        k3s_like_server(
            serving,
            other.cert_pem.encode(),
            control_plane.server_secret,
            control_plane.agent_secret,
        ) as url,
        pytest.raises(JoinRefused, match="hash does not match"),
    ):
        join(url, _agent_token(rendered, "agent-0"))


def test_a_server_replaying_the_ca_without_its_key_is_refused(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    other = generate_example_secrets(()).server_ca
    # The right CA bytes at /cacerts, but a certificate it did not sign: TLS refuses it.
    with (
        _control_plane(rendered).server(tmp_path, ca=other) as url,
        pytest.raises(JoinRefused, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        join(url, _agent_token(rendered, "agent-0"))


def test_the_server_refuses_a_wrong_secret(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    token = _agent_token(rendered, "agent-0")
    forged = token.rsplit(":", 1)[0] + ":" + "f" * 64
    with (
        _control_plane(rendered).server(tmp_path) as url,
        pytest.raises(JoinRefused, match="Unauthorized"),
    ):
        join(url, forged)
