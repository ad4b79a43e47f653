"""The cluster's identity: join secrets, certificate authorities, service account keys and
each node's SSH host key.

The deployment generates these with `pulumi_random`/`pulumi_tls` (state keeps them stable);
`generate_example_secrets` makes a throwaway set for the offline example. Either way the
checks below run on them before anything is rendered from them.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from raya.errors import RenderError

# k3s reads a secret shaped like this as a kubeadm bootstrap token, not as a join secret.
_BOOTSTRAP_TOKEN = re.compile(r"[a-z0-9]{6}\.[a-z0-9]{16}")
# Printable, no ':' (the token's separator) and nothing a YAML or shell reader could bend.
_JOIN_SECRET = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
# What google-auth requires of a service account key file besides "type" (the rest is optional).
_SERVICE_ACCOUNT_FIELDS = ("client_email", "token_uri", "private_key")
# A Hetzner Cloud API token: exactly 64 characters (what terraform-provider-hcloud checks,
# `hcloud/provider.go`), visible ASCII.
_HCLOUD_TOKEN = re.compile(r"[!-~]{64}")


@dataclass(frozen=True)
class CertificateAuthority:
    cert_pem: str  # exactly the bytes written as <name>.crt: one certificate, trailing "\n"
    key_pem: str


@dataclass(frozen=True)
class HostKey:
    """A node's SSH host key, decided by the deployment so nobody trusts it on first use."""

    private_openssh: str  # "-----BEGIN OPENSSH PRIVATE KEY-----..." (ed25519)
    public_openssh: str  # "ssh-ed25519 AAAA..."


@dataclass(frozen=True)
class SnapshotStore:
    """Where the control planes upload etcd snapshots: an S3 endpoint, bucket and folder,
    and the keys that write there (the values of k3s' `etcd-s3-config-secret`)."""

    endpoint: str
    bucket: str
    folder: str
    region: str
    access_key: str
    secret_key: str


@dataclass(frozen=True)
class ClusterSecrets:
    join_secret: str  # the server token's secret: the control plane's alone
    agent_secret: str  # the agents' (k3s `agent-token`): joins agents, never servers
    server_ca: CertificateAuthority
    client_ca: CertificateAuthority
    external_dns_key: str  # GCP service account key file (JSON text, base64-decoded)
    cert_manager_key: str
    # The cluster's own Hetzner API token (raya:clusterHcloudToken), for its cloud controller
    # and CSI driver: the control plane's alone.
    hcloud_token: str
    host_keys: Mapping[str, HostKey]  # node name -> its host key; a node's share holds its own
    snapshot_store: SnapshotStore | None = None  # None: snapshots stay on the control plane


def agent_token(server_ca_cert_pem: str, agent_secret: str) -> str:
    """An agent's full join token: the agent checks the CA it is served against the hash,
    then authenticates as k3s' `node` user, which may join agents but reach no server-only
    endpoint (the spec's `::server:` form would make every agent a holder of the server
    token, which k3s documents as administrator access)."""
    digest = hashlib.sha256(server_ca_cert_pem.encode()).hexdigest()
    return f"K10{digest}::node:{agent_secret}"


def server_token(server_ca_cert_pem: str, join_secret: str) -> str:
    """A joining server's full token (k3s' `K10<hash>::server:<secret>`): k3s checks the CA it
    is served against the hash, and keeps the secret alone as the cluster's token
    (k3s `pkg/cluster/storage.go`, `normalizeToken`)."""
    digest = hashlib.sha256(server_ca_cert_pem.encode()).hexdigest()
    return f"K10{digest}::server:{join_secret}"


def token_hash(join_secret: str) -> str:
    """What k3s records of the server token on each etcd snapshot it uploads (user metadata
    `k3s-token-hash`): the first 12 hex digits of the sha256 of the token's secret
    (k3s-io/k3s pkg/util/token.go, GetTokenHash and ShortHash)."""
    return hashlib.sha256(join_secret.encode()).hexdigest()[:12]


def check_server_secrets(value: ClusterSecrets) -> None:
    """The control plane's two join secrets: each usable, and not the same one (the agent
    token would then be the server token)."""
    check_join_secret("join_secret", value.join_secret)
    check_join_secret("agent_secret", value.agent_secret)
    if value.join_secret == value.agent_secret:
        raise RenderError("secrets: agent_secret equals join_secret; they must differ")


def check_join_secret(field: str, secret: str) -> None:
    if not _JOIN_SECRET.fullmatch(secret) or _BOOTSTRAP_TOKEN.fullmatch(secret):
        raise RenderError(
            f"secrets: {field} is not usable; accepted: 16-256 characters of "
            "A-Z a-z 0-9 . _ ~ + / = -, not shaped like a bootstrap token (xxxxxx.xxxxxxxxxxxxxxxx)"
        )


def check_hcloud_token(
    token: str, field: str = "hcloud_token", what: str = "raya:clusterHcloudToken"
) -> None:
    """A Hetzner token of the cluster's (`field`, `what` it is), checked without ever being
    shown."""
    if not _HCLOUD_TOKEN.fullmatch(token):
        raise RenderError(
            f"secrets: {field} ({what}) is {len(token)} characters; "
            "accepted: a Hetzner Cloud API token, 64 characters without spaces"
        )


def check_certificate_authority(field: str, ca: CertificateAuthority) -> None:
    """One CA certificate ending in one newline (those bytes make the token), and its key."""
    certificate = load_ca_certificate(field, ca.cert_pem)
    try:
        key = serialization.load_pem_private_key(ca.key_pem.encode(), password=None)
    except (ValueError, TypeError):
        raise RenderError(f"secrets: {field}.key_pem is not an unencrypted PEM key") from None
    if key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        raise RenderError(f"secrets: {field}.key_pem does not belong to {field}.cert_pem")


# Pure, and the deployment renders each node alone: every agent's render checks the same
# (public) certificate, a signature verification each time.
@functools.lru_cache(maxsize=16)
def load_ca_certificate(field: str, cert_pem: str) -> x509.Certificate:
    """The one self-signed CA certificate of `cert_pem`, or a RenderError naming `field`."""
    if cert_pem.count("-----BEGIN CERTIFICATE-----") != 1 or not cert_pem.endswith(
        "-----END CERTIFICATE-----\n"
    ):
        raise RenderError(
            f"secrets: {field}.cert_pem must hold exactly one PEM certificate ending in one newline"
        )
    try:
        certificate = x509.load_pem_x509_certificate(cert_pem.encode())
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
        usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value
        certificate.verify_directly_issued_by(certificate)
    except x509.ExtensionNotFound:
        raise RenderError(
            f"secrets: {field}.cert_pem lacks the basicConstraints or keyUsage extension"
        ) from None
    except (ValueError, TypeError, InvalidSignature):
        raise RenderError(f"secrets: {field}.cert_pem is not a self-signed certificate") from None
    if not constraints.ca or not usage.key_cert_sign:
        raise RenderError(f"secrets: {field}.cert_pem is not a CA (needs CA:true and keyCertSign)")
    return certificate


def check_host_key(node: str, host_keys: Mapping[str, HostKey]) -> HostKey:
    """Node `node`'s host key: an unencrypted OpenSSH ed25519 key and its own public half."""
    field = f"secrets: host_keys[{node}]"
    if node not in host_keys:
        raise RenderError(f"{field} is missing; every node needs its SSH host key")
    key = host_keys[node]
    try:
        private = serialization.load_ssh_private_key(key.private_openssh.encode(), password=None)
    except (ValueError, TypeError):
        raise RenderError(f"{field}.private_openssh is not an unencrypted OpenSSH key") from None
    if not isinstance(private, ed25519.Ed25519PrivateKey):
        raise RenderError(f"{field}.private_openssh is not an ed25519 key; accepted: ed25519")
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    if key.public_openssh.split()[:2] != public.decode().split():
        raise RenderError(f"{field}.public_openssh is not the public half of its private key")
    return key


def check_service_account_key(field: str, text: str) -> None:
    """Refuse what Google's own loaders refuse (google-auth's `load_credentials_from_dict`).

    Those dispatch on "type", need "client_email" and "token_uri", and parse "private_key" as an
    unencrypted PEM key; signing (RS256) needs RSA. Every other field is optional.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        raise RenderError(
            f"secrets: {field} is not JSON; accepted: a GCP service account key file (decoded)"
        ) from None
    if not (
        isinstance(document, dict)
        and document.get("type") == "service_account"
        and all(isinstance(document.get(key), str) for key in _SERVICE_ACCOUNT_FIELDS)
    ):
        raise RenderError(
            f"secrets: {field} is not a GCP service account key "
            '(needs "type": "service_account", "client_email", "token_uri" and "private_key")'
        )
    try:
        # OpenSSL's own check of an RSA key tests p and q for primality: about 50 ms a key,
        # for every render. _consistent_rsa checks the rest of what it checks.
        key = serialization.load_pem_private_key(
            document["private_key"].encode(), None, unsafe_skip_rsa_key_validation=True
        )
    except (ValueError, TypeError):
        key = None
    if not (isinstance(key, rsa.RSAPrivateKey) and _consistent_rsa(key.private_numbers())):
        raise RenderError(
            f"secrets: {field}: private_key is not an unencrypted PEM RSA private key "
            "(PKCS#1 or PKCS#8), as GCP issues"
        )


def _consistent_rsa(key: rsa.RSAPrivateNumbers) -> bool:
    """What OpenSSL's RSA_check_key checks of a private key, but the primality of p and q
    (which no corruption of a key issued by GCP preserves): n = pq, the exponents inverse
    modulo p-1 and q-1, and the CRT values derived from them."""
    p, q, e, n = key.p, key.q, key.public_numbers.e, key.public_numbers.n
    return (
        p > 1
        and q > 1
        and p * q == n
        and key.dmp1 == key.d % (p - 1)
        and key.dmq1 == key.d % (q - 1)
        and e * key.dmp1 % (p - 1) == 1
        and e * key.dmq1 % (q - 1) == 1
        and key.iqmp * q % p == 1
    )


def generate_example_secrets(nodes: Iterable[str]) -> ClusterSecrets:
    """A throwaway identity for the offline example's `nodes` (their names): never use it for
    a real cluster."""
    # One RSA key for both service accounts: generating one takes about 60 ms (a random
    # search for primes), more than the host keys of 200 agents, and a throwaway key is as
    # good twice.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ClusterSecrets(
        join_secret=secrets.token_hex(32),
        agent_secret=secrets.token_hex(32),
        server_ca=_example_ca("raya-example-server-ca"),
        client_ca=_example_ca("raya-example-client-ca"),
        external_dns_key=example_service_account_key(
            "external-dns@raya-example.iam.gserviceaccount.com", "raya-example", key
        ),
        cert_manager_key=example_service_account_key(
            "cert-manager@raya-example.iam.gserviceaccount.com", "raya-example", key
        ),
        hcloud_token=secrets.token_hex(32),
        host_keys={node: example_host_key() for node in nodes},
        snapshot_store=SnapshotStore(
            endpoint="storage.googleapis.com",
            bucket="raya-etcd-example",
            folder="raya",
            region="auto",
            access_key="GOOG1E" + secrets.token_hex(28).upper()[:55],
            secret_key=secrets.token_urlsafe(30)[:40],
        ),
    )


def example_host_key() -> HostKey:
    key = ed25519.Ed25519PrivateKey.generate()
    return HostKey(
        private_openssh=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode(),
        public_openssh=key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode(),
    )


def _example_ca(common_name: str) -> CertificateAuthority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(
        cert_pem=certificate.public_bytes(serialization.Encoding.PEM).decode(),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode(),
    )


def example_service_account_key(
    email: str, project: str, key: rsa.RSAPrivateKey | None = None
) -> str:
    """Shaped like GCP's key file (and as large: an RSA-2048 key, `key` or a new one), valid
    for nothing."""
    key = key or rsa.generate_private_key(public_exponent=65537, key_size=2048)
    certs = "https://www.googleapis.com/robot/v1/metadata/x509/"
    document = {
        "type": "service_account",
        "project_id": project,
        "private_key_id": secrets.token_hex(20),
        "private_key": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
        "client_email": email,
        "client_id": str(secrets.randbelow(10**21)),
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": "https://oauth2.googleapis.com/token",
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "client_x509_cert_url": certs + email.replace("@", "%40"),
        "universe_domain": "googleapis.com",
    }
    return json.dumps(document, indent=2) + "\n"
