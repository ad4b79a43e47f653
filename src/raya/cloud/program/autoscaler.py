"""The cluster autoscaler's manifests for the autoscaled pools (raya.nodes.autoscaler): built
from the cluster's agent secret and server CA, which only the program holds, and its own token."""

from __future__ import annotations

import pulumi

from raya.cloud.program.outputs import gather
from raya.cloud.program.secrets import Identity
from raya.errors import RayaError
from raya.model.fleet import Cluster
from raya.model.pins import ChartPin, Pins
from raya.nodes.autoscaler import manifests
from raya.nodes.identity import CertificateAuthority, ClusterSecrets
from raya.nodes.render import render_pool


def define_autoscaler(
    cluster: Cluster, pins: Pins, chart: ChartPin, identity: Identity, token: pulumi.Input[str]
) -> pulumi.Output[str]:
    """The autoscaler's Secret and HelmChart (of `chart`, its pin; one YAML stream), a
    secret: each pool's config in it carries the agent token, and the Secret the
    autoscaler's Hetzner token."""

    def build(values: list[str]) -> str:
        agent_secret, server_ca, autoscaler_token = values
        # An agent's share, as `Identity.agent_secrets` gives a node, without a host key:
        # no node of the pool has one decided ahead.
        secrets = ClusterSecrets(
            join_secret="",
            agent_secret=agent_secret,
            server_ca=CertificateAuthority(cert_pem=server_ca, key_pem=""),
            client_ca=CertificateAuthority(cert_pem="", key_pem=""),
            external_dns_key="",
            cert_manager_key="",
            hcloud_token="",
            host_keys={},
        )
        try:
            pools = [render_pool(cluster, pool, secrets) for pool in cluster.autoscaled]
            return manifests(cluster, pins, chart, pools, autoscaler_token)
        except RayaError as error:
            # Raised while Pulumi resolves outputs: RunError is reported without a traceback.
            raise pulumi.RunError(f"cluster autoscaler: {error}") from None

    values = gather(
        identity.agent_secret, identity.server_ca.cert_pem, pulumi.Output.from_input(token)
    )
    return pulumi.Output.secret(values.apply(lambda v: build(list(v))))
