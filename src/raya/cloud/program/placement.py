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

from dataclasses import dataclass

import pulumi
import pulumi_hcloud as hcloud

from raya.cloud.program.cluster import CLUSTER_LABEL
from raya.cloud.program.network import Network
from raya.errors import DeployError
from raya.model.fleet import Cluster

# Hetzner's limits (its docs, "Placement groups", "Resources and attributes"): up to 10
# servers in a spread group, up to 50 groups in a project.
SPREAD_LIMIT = 10
GROUPS_PER_PROJECT = 50
K3S_PORT = 6443
# The smallest type: 5 targets and a TCP service are far below its limits.
BALANCER_TYPE = "lb11"


@dataclass(frozen=True)
class SpreadGroup:
    resource: str  # the Pulumi resource name
    suffix: str  # its Hetzner name is `<clusterName>-<suffix>`
    nodes: tuple[str, ...]  # the nodes created in it
    labels: dict[str, str]


def spread_groups(cluster: Cluster) -> tuple[SpreadGroup, ...]:
    """The spread groups and who is in each: every control plane when there are several, the
    list form's first SPREAD_LIMIT agents when there are several, and each pool's nodes 0 to
    SPREAD_LIMIT - 1 (a pool's group exists from its first node, so that its next nodes join
    the group the first is in). Refused past Hetzner's limit of groups in a project."""
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
    groups = tuple(
        SpreadGroup(resource, suffix, tuple(node.name for node in placed), labels)
        for resource, suffix, placed, labels, fewest in sets
        # A group of one control plane or listed agent spreads nothing.
        if len(placed) >= fewest
    )
    if len(groups) > GROUPS_PER_PROJECT:
        others = sum(1 for group in groups if not group.labels)
        raise DeployError(
            f"deploy/fleet/agents.json: pools: the cluster needs {len(groups)} spread placement "
            f"groups (one per pool with nodes, one for the control planes when there are "
            f"several, one for the list form's agents), but Hetzner holds at most "
            f"{GROUPS_PER_PROJECT} in a project (Hetzner's docs, \"Placement groups\"), other "
            f"stacks' included; accepted: at most {GROUPS_PER_PROJECT - others} pools with nodes"
        )
    return groups


def define_placement_groups(
    cluster: Cluster, groups: tuple[SpreadGroup, ...]
) -> dict[str, hcloud.PlacementGroup]:
    """Node name -> its spread group, of `groups` (`spread_groups`, checked before anything
    is declared)."""
    name = cluster.config.cluster_name
    placed: dict[str, hcloud.PlacementGroup] = {}
    for group in groups:
        resource = hcloud.PlacementGroup(
            group.resource,
            name=f"{name}-{group.suffix}",
            type="spread",
            labels={CLUSTER_LABEL: name, **group.labels},
        )
        placed.update(dict.fromkeys(group.nodes, resource))
    return placed


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
