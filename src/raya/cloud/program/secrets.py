"""The cluster's identities: join secrets, server and client CAs, DNS service accounts, the
admin's client certificate and kubeconfig, each node's SSH host key, and the cluster's own
Hetzner token (a stack setting, carried as a secret).

Random and TLS resources live in the Pulumi state, so they are generated once and never
change between runs; every value here is a Pulumi secret. A stack built from a recovery kit
(`raya:fromRecoveryKit`) takes the server token, the agent secret and both CA pairs from the
kit instead: the cluster keeps the identity its snapshots and its nodes' trust were made with.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_random as random
import pulumi_tls as tls

from raya.cloud import kubeconfig
from raya.cloud.kit import RecoveryKit
from raya.cloud.program.dns import define_dns_access
from raya.cloud.program.outputs import gather
from raya.model.config import StackConfig
from raya.nodes.identity import CertificateAuthority, ClusterSecrets, HostKey, SnapshotStore

CA_VALIDITY_HOURS = 10 * 365 * 24
CA_USES = ["cert_signing", "digital_signature", "crl_signing"]
# The cluster's own GCP identities: each may change records in the cluster's zone alone
# (raya.cloud.program.dns.define_dns_access).
SERVICE_ACCOUNTS = ("external-dns", "cert-manager")
_ACCOUNT_ID_MAX = 30
# The admin's client certificate: valid 90 days, re-issued by any `raya up` in its last 30.
ADMIN_VALIDITY_HOURS = 90 * 24
ADMIN_RENEWAL_HOURS = 30 * 24


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
    hcloud_token: pulumi.Output[str]  # the cluster's own (raya:clusterHcloudToken)
    host_keys: dict[str, tls.PrivateKey]  # node name -> its SSH host key
    kubeconfig: pulumi.Output[str]  # the admin's, a secret

    def host_key(self, node: str) -> pulumi.Output[HostKey]:
        key = self.host_keys[node]
        return gather(key.private_key_openssh, key.public_key_openssh).apply(
            lambda v: HostKey(private_openssh=v[0], public_openssh=v[1])
        )

    def control_plane_secrets(
        self, node: str, snapshot_store: pulumi.Output[SnapshotStore]
    ) -> pulumi.Output[ClusterSecrets]:
        """Everything the control plane's config carries."""
        values = gather(
            self.join_secret,
            self.agent_secret,
            self.server_ca.cert_pem,
            self.server_ca.key_pem,
            self.client_ca.cert_pem,
            self.client_ca.key_pem,
            self.external_dns_key,
            self.cert_manager_key,
            self.hcloud_token,
            self.host_key(node),
            snapshot_store,
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
                    hcloud_token=v[8],
                    host_keys={node: v[9]},
                    snapshot_store=v[10],
                )
            )
        )

    def agent_secrets(self, node: str) -> pulumi.Output[ClusterSecrets]:
        """Agent `node`'s share: the agent secret, the server CA certificate and its own host
        key, nothing else.

        The server token, the control plane's private keys and the other nodes' host keys are
        not even inputs of this output, so no agent config can carry them nor be re-rendered
        when they change.
        """
        values = gather(self.agent_secret, self.server_ca.cert_pem, self.host_key(node))
        return pulumi.Output.secret(
            values.apply(
                lambda v: ClusterSecrets(
                    join_secret="",
                    agent_secret=v[0],
                    server_ca=CertificateAuthority(cert_pem=v[1], key_pem=""),
                    client_ca=CertificateAuthority(cert_pem="", key_pem=""),
                    external_dns_key="",
                    cert_manager_key="",
                    hcloud_token="",
                    host_keys={node: v[2]},
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


def _ecdsa_key(name: str) -> tls.PrivateKey:
    return tls.PrivateKey(
        name,
        algorithm="ECDSA",
        ecdsa_curve="P256",
        opts=pulumi.ResourceOptions(additional_secret_outputs=["private_key_pem"]),
    )


def _authority(name: str, common_name: str) -> Authority:
    key = _ecdsa_key(f"{name}-key")
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


def _dns_account(config: StackConfig, purpose: str) -> gcp.serviceaccount.Account:
    return gcp.serviceaccount.Account(
        purpose,
        account_id=account_id(config.cluster_name, purpose),
        display_name=f"{config.cluster_name} {purpose}",
        description=f"{purpose} of the {config.cluster_name} cluster: manages its DNS records",
    )


def _service_account_key(account: gcp.serviceaccount.Account, purpose: str) -> (
    pulumi.Output[str]
):
    key = gcp.serviceaccount.Key(
        f"{purpose}-key",
        service_account_id=account.name,
        opts=pulumi.ResourceOptions(additional_secret_outputs=["private_key"]),
    )
    return pulumi.Output.secret(key.private_key.apply(_decode_key))


def _host_key(node: str) -> tls.PrivateKey:
    return tls.PrivateKey(
        f"{node}-host-key",
        algorithm="ED25519",
        opts=pulumi.ResourceOptions(
            additional_secret_outputs=["private_key_openssh", "private_key_pem"]
        ),
    )


def _admin_kubeconfig(config: StackConfig, server_ca: Authority, client_ca: Authority) -> (
    pulumi.Output[str]
):
    """The admin's kubeconfig: a client certificate the client CA signs, in group
    system:masters, trusting the server CA for the control plane's public name."""
    key = _ecdsa_key("admin-key")
    request = tls.CertRequest(
        "admin-request",
        private_key_pem=key.private_key_pem,
        subject=tls.CertRequestSubjectArgs(
            common_name=kubeconfig.ADMIN_USER, organization=kubeconfig.ADMIN_GROUP
        ),
    )
    cert = tls.LocallySignedCert(
        "admin-cert",
        cert_request_pem=request.cert_request_pem,
        ca_cert_pem=client_ca.cert_pem,
        ca_private_key_pem=client_ca.key_pem,
        validity_period_hours=ADMIN_VALIDITY_HOURS,
        early_renewal_hours=ADMIN_RENEWAL_HOURS,
        allowed_uses=["digital_signature", "client_auth"],
    )
    server = kubeconfig.api_server_url(config.zone_dns_name)
    built = pulumi.Output.all(server_ca.cert_pem, cert.cert_pem, key.private_key_pem).apply(
        lambda v: kubeconfig.build(config.cluster_name, server, v[0], v[1], v[2])
    )
    return pulumi.Output.secret(built)


def _join_secret(name: str) -> pulumi.Output[str]:
    secret = random.RandomPassword(
        name,
        length=48,
        # Letters and digits only: never shaped like a k3s bootstrap token (`abcdef.0123...`).
        special=False,
        opts=pulumi.ResourceOptions(additional_secret_outputs=["result"]),
    )
    return pulumi.Output.secret(secret.result)


def _kept_authority(ca: CertificateAuthority) -> Authority:
    return Authority(
        cert_pem=pulumi.Output.from_input(ca.cert_pem),
        key_pem=pulumi.Output.secret(ca.key_pem),
    )


def define_identity(
    config: StackConfig,
    nodes: Sequence[str],
    hcloud_token: pulumi.Input[str],
    zone: gcp.dns.ManagedZone,
    kit: RecoveryKit | None = None,
) -> Identity:
    """The cluster's identities, the DNS accounts' rights in `zone` with them; with `kit`, its
    server token, agent secret and CA pairs are the kit's (no random or CA resource is
    declared for them)."""
    accounts = {purpose: _dns_account(config, purpose) for purpose in SERVICE_ACCOUNTS}
    define_dns_access(config, zone, accounts)
    external_dns, cert_manager = (
        _service_account_key(accounts[purpose], purpose) for purpose in SERVICE_ACCOUNTS
    )
    if kit is None:
        server_ca = _authority("server-ca", f"{config.cluster_name}-server-ca")
        client_ca = _authority("client-ca", f"{config.cluster_name}-client-ca")
        join_secret = _join_secret("join-secret")
        agent_secret = _join_secret("agent-secret")
    else:
        server_ca, client_ca = _kept_authority(kit.server_ca), _kept_authority(kit.client_ca)
        join_secret = pulumi.Output.secret(kit.join_secret)
        agent_secret = pulumi.Output.secret(kit.agent_secret)
    return Identity(
        join_secret=join_secret,
        agent_secret=agent_secret,
        server_ca=server_ca,
        client_ca=client_ca,
        external_dns_key=external_dns,
        cert_manager_key=cert_manager,
        hcloud_token=pulumi.Output.secret(hcloud_token),
        host_keys={node: _host_key(node) for node in nodes},
        kubeconfig=_admin_kubeconfig(config, server_ca, client_ca),
    )
