"""The cluster's identities: join secrets, server and client CAs, DNS service accounts.

Random and TLS resources live in the Pulumi state, so they are generated once and never
change between runs; every value here is a Pulumi secret.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_random as random
import pulumi_tls as tls

from raya.config import StackConfig
from raya.identity import CertificateAuthority, ClusterSecrets

CA_VALIDITY_HOURS = 10 * 365 * 24
CA_USES = ["cert_signing", "digital_signature", "crl_signing"]
DNS_ADMIN = "roles/dns.admin"
# The cluster's own GCP identities, each holding roles/dns.admin on the project.
SERVICE_ACCOUNTS = ("external-dns", "cert-manager")
_ACCOUNT_ID_MAX = 30


@dataclass(frozen=True)
class Authority:
    cert_pem: pulumi.Output[str]
    key_pem: pulumi.Output[str]


@dataclass(frozen=True)
class Identity:
    join_secret: pulumi.Output[str]
    agent_secret: pulumi.Output[str]
    server_ca: Authority
    client_ca: Authority
    external_dns_key: pulumi.Output[str]
    cert_manager_key: pulumi.Output[str]

    def control_plane_secrets(self) -> pulumi.Output[ClusterSecrets]:
        """Everything the control plane's config carries."""
        values = pulumi.Output.all(
            self.join_secret,
            self.agent_secret,
            self.server_ca.cert_pem,
            self.server_ca.key_pem,
            self.client_ca.cert_pem,
            self.client_ca.key_pem,
            self.external_dns_key,
            self.cert_manager_key,
        )
        return pulumi.Output.secret(
            values.apply(
                lambda v: ClusterSecrets(
                    join_secret=v[0],
                    agent_secret=v[1],
                    server_ca=CertificateAuthority(cert_pem=v[2], key_pem=v[3]),
                    client_ca=CertificateAuthority(cert_pem=v[4], key_pem=v[5]),
                    external_dns_key=v[6],
                    cert_manager_key=v[7],
                )
            )
        )

    def agent_secrets(self) -> pulumi.Output[ClusterSecrets]:
        """An agent's share: the agent secret and the server CA certificate, nothing else.

        The server token and the control plane's private keys are not even inputs of this
        output, so no agent config can carry them nor be re-rendered when they change.
        """
        values = pulumi.Output.all(self.agent_secret, self.server_ca.cert_pem)
        return pulumi.Output.secret(
            values.apply(
                lambda v: ClusterSecrets(
                    join_secret="",
                    agent_secret=v[0],
                    server_ca=CertificateAuthority(cert_pem=v[1], key_pem=""),
                    client_ca=CertificateAuthority(cert_pem="", key_pem=""),
                    external_dns_key="",
                    cert_manager_key="",
                )
            )
        )


def account_id(cluster_name: str, purpose: str) -> str:
    """A GCP service account id (6-30 characters) unique to this cluster and purpose."""
    candidate = f"{cluster_name}-{purpose}"
    if len(candidate) <= _ACCOUNT_ID_MAX:
        return candidate
    # Too long: keep a readable prefix and tell long names apart by a digest.
    digest = hashlib.sha256(cluster_name.encode()).hexdigest()[:6]
    keep = _ACCOUNT_ID_MAX - len(purpose) - len(digest) - 2
    return f"{cluster_name[:keep].rstrip('-')}-{digest}-{purpose}"


def _authority(name: str, common_name: str) -> Authority:
    key = tls.PrivateKey(
        f"{name}-key",
        algorithm="ECDSA",
        ecdsa_curve="P256",
        opts=pulumi.ResourceOptions(additional_secret_outputs=["private_key_pem"]),
    )
    cert = tls.SelfSignedCert(
        name,
        private_key_pem=key.private_key_pem,
        is_ca_certificate=True,
        allowed_uses=CA_USES,
        validity_period_hours=CA_VALIDITY_HOURS,
        subject=tls.SelfSignedCertSubjectArgs(common_name=common_name),
    )
    return Authority(cert_pem=cert.cert_pem, key_pem=pulumi.Output.secret(key.private_key_pem))


def _decode_key(private_key: str) -> str:
    """GCP hands out the key file base64-encoded; the cluster wants the JSON itself."""
    return base64.b64decode(private_key, validate=True).decode()


def _service_account_key(config: StackConfig, purpose: str) -> pulumi.Output[str]:
    account = gcp.serviceaccount.Account(
        purpose,
        account_id=account_id(config.cluster_name, purpose),
        display_name=f"{config.cluster_name} {purpose}",
        description=f"{purpose} of the {config.cluster_name} cluster: manages its DNS records",
    )
    gcp.projects.IAMMember(
        f"{purpose}-dns-admin",
        project=account.project,
        role=DNS_ADMIN,
        member=account.member,
    )
    key = gcp.serviceaccount.Key(
        f"{purpose}-key",
        service_account_id=account.name,
        opts=pulumi.ResourceOptions(additional_secret_outputs=["private_key"]),
    )
    return pulumi.Output.secret(key.private_key.apply(_decode_key))


def _join_secret(name: str) -> pulumi.Output[str]:
    secret = random.RandomPassword(
        name,
        length=48,
        # Letters and digits only: never shaped like a k3s bootstrap token (`abcdef.0123...`).
        special=False,
        opts=pulumi.ResourceOptions(additional_secret_outputs=["result"]),
    )
    return pulumi.Output.secret(secret.result)


def define_identity(config: StackConfig) -> Identity:
    external_dns, cert_manager = (_service_account_key(config, p) for p in SERVICE_ACCOUNTS)
    return Identity(
        join_secret=_join_secret("join-secret"),
        agent_secret=_join_secret("agent-secret"),
        server_ca=_authority("server-ca", f"{config.cluster_name}-server-ca"),
        client_ca=_authority("client-ca", f"{config.cluster_name}-client-ca"),
        external_dns_key=external_dns,
        cert_manager_key=cert_manager,
    )
