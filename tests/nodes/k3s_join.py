"""The two ends of a k3s join, as k3s does them, over real TLS: a server holding the
cluster's server CA, and an agent holding only its server URL and full token. The join
tests run them on 127.0.0.1; the boot tests' stand-in k3s runs them inside booted nodes.

The agent follows k3s (pkg/clientaccess/token.go): fetch /cacerts without verifying,
compare its sha256 with the token's hash, then talk to the server trusting only that
bundle, authenticating with the token's user and secret (`K10<hash>::<user>:<secret>`).

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
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raya.nodes.identity import CertificateAuthority
from tests.support import Reply, Respond, http_server, routes


class JoinRefused(Exception):
    pass


def serving_certificate(
    ca: CertificateAuthority,
    folder: Path,
    address: str = "127.0.0.1",
    dns_names: Sequence[str] = (),
    valid: datetime.timedelta = datetime.timedelta(days=1),
) -> tuple[Path, Path]:
    """A serving certificate for `address` (and `dns_names`, as k3s' `tls-san`: a name, or an
    address given as text) signed by `ca`, as k3s' dynamiclistener makes, valid for `valid`
    from now."""
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
        .not_valid_after(now + valid)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address(address)),
                    *(_alternative_name(name) for name in dns_names),
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


def _alternative_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


AGENT_PATHS = ("/v1-k3s/config", "/v1-k3s/client-kubelet.crt")
SERVER_PATHS = ("/v1-k3s/server-bootstrap", "/v1-k3s/token", "/v1-k3s/encrypt/status")


def k3s_like_server(
    serving: tuple[Path, Path],
    cacerts: bytes,
    server_secret: str,
    agent_secret: str,
    address: tuple[str, int] = ("127.0.0.1", 0),
    name: str = "",
    server_bodies: Mapping[str, Callable[[], bytes]] | None = None,
    *,
    agent_handlers: Mapping[str, Respond] | None = None,
    api: Respond | None = None,
    client_ca: str | None = None,
) -> contextlib.AbstractContextManager[str]:
    """HTTPS on `address` with k3s' two users and the roles its endpoints require; `name`,
    the server's node name, ends its welcome (so a join through a load balancer tells which
    server answered). `server_bodies`: more endpoints for the `server` user only, each
    answered with what its function returns at the time of the request; `agent_handlers`:
    endpoints for the `node` user (k3s:agent), answered by their function from the request.
    `api`: what answers every path under /api/, as k3s' supervisor hands those to the API
    server on the same port (pkg/server/handlers/router.go, `APIServer`); with `client_ca`
    (PEM), a client certificate is asked for, not required, and checked against it, as
    kube-apiserver does (`tls.RequestClientCert`)."""
    users = {"server": (server_secret, "k3s:server"), "node": (agent_secret, "k3s:agent")}

    def guarded(role: str, answer: Respond | None = None) -> Respond:
        def respond(request: BaseHTTPRequestHandler) -> Reply:
            header = request.headers.get("Authorization", "").removeprefix("Basic ")
            user, _, secret = base64.b64decode(header).decode().partition(":")
            if user not in users or not hmac.compare_digest(users[user][0], secret):
                return 401, b"not authorized"
            if users[user][1] != role:
                return 403, b"forbidden"
            if answer is not None:
                return answer(request)
            return 200, f"welcome to {request.path}{f' from {name}' if name else ''}".encode()

        return respond

    def body_of(body: Callable[[], bytes]) -> Respond:
        return lambda request: (200, body())

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*serving)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(cadata=client_ca)
    endpoints: dict[str, bytes | Respond] = {
        "/cacerts": cacerts,
        **{path: guarded("k3s:agent") for path in AGENT_PATHS},
        **{path: guarded("k3s:agent", answer) for path, answer in (agent_handlers or {}).items()},
        **{path: guarded("k3s:server") for path in SERVER_PATHS},
        **{
            path: guarded("k3s:server", body_of(body))
            for path, body in (server_bodies or {}).items()
        },
    }
    supervisor = routes(endpoints)

    def respond(request: BaseHTTPRequestHandler) -> Reply:
        if api is not None and request.path.startswith("/api/"):
            return api(request)
        return supervisor(request)

    return http_server(respond, tls=context, address=address)


def join(
    url: str,
    token: str,
    path: str = "/v1-k3s/config",
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> bytes:
    """What a k3s agent does with its server URL and full token, then a GET of `path` (a
    POST of `data` if given, with `headers`); JoinRefused if the agent would not go on or the
    server refuses."""
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
    request = urllib.request.Request(f"{url}{path}", data=data, headers=dict(headers or {}))
    credentials = base64.b64encode(f"{user}:{secret}".encode()).decode()
    request.add_header("Authorization", f"Basic {credentials}")
    try:
        with urllib.request.urlopen(request, context=trusting, timeout=10) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as error:
        # The reason, then what the server said (k3s sends why in the body).
        said = error.read().decode(errors="replace").strip()
        raise JoinRefused(f"{error.reason}{f': {said}' if said else ''}") from None
    except urllib.error.URLError as error:
        raise JoinRefused(str(error.reason)) from None
