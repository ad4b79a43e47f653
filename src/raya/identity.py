"""The cluster's identity: join secret, certificate authorities and service account keys.

The deployment generates these with `pulumi_random`/`pulumi_tls` (state keeps them stable);
`generate_example_secrets` makes a throwaway set for the offline example. Either way they go
through `check_secrets` before anything is rendered from them.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import secrets
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from raya.errors import RenderError

# k3s reads a secret shaped like this as a kubeadm bootstrap token, not as a join secret.
_BOOTSTRAP_TOKEN = re.compile(r"[a-z0-9]{6}\.[a-z0-9]{16}")
# Printable, no ':' (the token's separator) and nothing a YAML or shell reader could bend.
_JOIN_SECRET = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
# What google-auth requires of a service account key file besides "type" (the rest is optional).
_SERVICE_ACCOUNT_FIELDS = ("client_email", "token_uri", "private_key")


@dataclass(frozen=True)
class CertificateAuthority:
    cert_pem: str  # exactly the bytes written as <name>.crt: one certificate, trailing "\n"
    key_pem: str


@dataclass(frozen=True)
class ClusterSecrets:
    join_secret: str
    server_ca: CertificateAuthority
    client_ca: CertificateAuthority
    external_dns_key: str  # GCP service account key file (JSON text, base64-decoded)
    cert_manager_key: str


def full_token(server_ca_cert_pem: str, join_secret: str) -> str:
    """k3s' full join token: the agent checks the CA it is served against this hash."""
    digest = hashlib.sha256(server_ca_cert_pem.encode()).hexdigest()
    return f"K10{digest}::server:{join_secret}"


def check_secrets(value: ClusterSecrets) -> None:
    """Refuse secrets k3s or GCP would reject or misread, before a node is built from them."""
    check_join_secret(value.join_secret)
    check_certificate_authority("server_ca", value.server_ca)
    check_certificate_authority("client_ca", value.client_ca)
    check_service_account_key("external_dns_key", value.external_dns_key)
    check_service_account_key("cert_manager_key", value.cert_manager_key)


def check_join_secret(join_secret: str) -> None:
    if not _JOIN_SECRET.fullmatch(join_secret) or _BOOTSTRAP_TOKEN.fullmatch(join_secret):
        raise RenderError(
            "secrets: join_secret is not usable; accepted: 16-256 characters of "
            "A-Z a-z 0-9 . _ ~ + / = -, not shaped like a bootstrap token (xxxxxx.xxxxxxxxxxxxxxxx)"
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
        key = serialization.load_pem_private_key(document["private_key"].encode(), None)
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise RenderError(
            f"secrets: {field}: private_key is not an unencrypted PEM RSA private key "
            "(PKCS#1 or PKCS#8), as GCP issues"
        )


def generate_example_secrets() -> ClusterSecrets:
    """A throwaway identity for the offline example: never use it for a real cluster."""
    return ClusterSecrets(
        join_secret=secrets.token_hex(32),
        server_ca=_example_ca("raya-example-server-ca"),
        client_ca=_example_ca("raya-example-client-ca"),
        external_dns_key=example_service_account_key(
            "external-dns@raya-example.iam.gserviceaccount.com", "raya-example"
        ),
        cert_manager_key=example_service_account_key(
            "cert-manager@raya-example.iam.gserviceaccount.com", "raya-example"
        ),
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


def example_service_account_key(email: str, project: str) -> str:
    """Shaped like GCP's key file (and as large: an RSA-2048 key), valid for nothing."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
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
