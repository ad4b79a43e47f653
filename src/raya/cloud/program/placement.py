"""Where the servers run: Hetzner spread placement groups, and the private load balancer in
front of several control planes.

A spread group puts each of its servers on another physical host, so one host failure takes
at most one of them; Hetzner holds at most 10 servers in one (Hetzner's docs, "Placement
groups"). The control planes share one, the agents another while they fit.

Agents and joining servers register through one fixed address (k3s' "fixed registration
address", docs.k3s.io/architecture): with several control planes, a Hetzner load balancer
with no public interface, on the private network at `StackConfig.registration_ip`, sending
6443/tcp to whichever control planes pass its health check. Once registered, a k3s agent
learns every server from the API and balances across them itself (its client load balancer),
so the load balancer only serves first contact; the public API name is A records of every
control plane, behind the firewall (`raya.cloud.program.dns`).
"""

from __future__ import annotations

import pulumi
import pulumi_hcloud as hcloud

from raya.cloud.program.cluster import CLUSTER_LABEL
from raya.cloud.program.network import Network
from raya.model.fleet import Cluster

# Hetzner's limit of servers in one spread placement group.
SPREAD_LIMIT = 10
K3S_PORT = 6443
# The smallest type: 5 targets and a TCP service are far below its limits.
BALANCER_TYPE = "lb11"


def define_placement_groups(cluster: Cluster) -> dict[str, hcloud.PlacementGroup]:
    """Node name -> its spread group: every control plane when there are several, the list
    form's first SPREAD_LIMIT agents when there are several, and each pool's nodes 0 to
    SPREAD_LIMIT - 1 (a pool's group exists from its first node, so that its next nodes join
    the group the first is in)."""
    name = cluster.config.cluster_name
    listed = [node for node in cluster.agents if node.pool is None][:SPREAD_LIMIT]
    pools = sorted({node.pool for node in cluster.agents if node.pool is not None})
    sets = [
        ("control-planes", "control-planes", list(cluster.control_planes), {}, 2),
        ("agents", "agents", listed, {}, 2),
        *(
            (f"pool-{pool}", pool, [n for n in cluster.agents if n.pool == pool
                                    and n.index is not None and n.index < SPREAD_LIMIT],
             {"pool": pool}, 1)
            for pool in pools
        ),
    ]  # fmt: skip
    groups: dict[str, hcloud.PlacementGroup] = {}
    for resource, suffix, placed, labels, fewest in sets:
        if len(placed) < fewest:
            continue  # a group of one control plane or listed agent spreads nothing
        group = hcloud.PlacementGroup(
            resource,
            name=f"{name}-{suffix}",
            type="spread",
            labels={CLUSTER_LABEL: name, **labels},
        )
        groups.update(dict.fromkeys((node.name for node in placed), group))
    return groups


def define_registration_balancer(
    cluster: Cluster, network: Network
) -> hcloud.LoadBalancer | None:
    """The private load balancer agents and joining servers register through; none for a
    single control plane, whose own address is the registration address."""
    config = cluster.config
    if len(cluster.control_planes) == 1:
        return None
    labels = {CLUSTER_LABEL: config.cluster_name}
    balancer = hcloud.LoadBalancer(
        "registration",
        name=f"{config.cluster_name}-registration",
        load_balancer_type=BALANCER_TYPE,
        location=config.location,
        labels=labels,
    )
    balancer_id = balancer.id.apply(int)
    attached = hcloud.LoadBalancerNetwork(
        "registration-network",
        load_balancer_id=balancer_id,
        subnet_id=network.subnet.id,
        ip=str(config.registration_ip),
        # Private only: nothing outside the network reaches it, the firewall's sources hold.
        enable_public_interface=False,
    )
    hcloud.LoadBalancerTarget(
        "registration-targets",
        type="label_selector",
        load_balancer_id=balancer_id,
        label_selector=f"{CLUSTER_LABEL}={config.cluster_name},role=control-plane",
        use_private_ip=True,
        opts=pulumi.ResourceOptions(depends_on=[attached]),
    )
    hcloud.LoadBalancerService(
        "registration-k3s",
        load_balancer_id=balancer.id,
        protocol="tcp",
        listen_port=K3S_PORT,
        destination_port=K3S_PORT,
        # A server that does not accept connections (down, still starting) gets none.
        health_check=hcloud.LoadBalancerServiceHealthCheckArgs(
            protocol="tcp", port=K3S_PORT, interval=5, timeout=3, retries=2
        ),
    )
    return balancer
