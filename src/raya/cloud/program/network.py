"""The spec's `network.tf`: the private network, its `nodes` cloud subnet and the
`load-balancers` subnet where Hetzner addresses the cloud controller's load balancers; in the
public mode (`raya:network: public`), no network but each node's public address and raya's
load balancers (Traefik's and `raya:loadBalancers`)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_hcloud as hcloud

from raya.model.config import INGRESS_BALANCER, LoadBalancer, StackConfig
from raya.model.fleet import Cluster, server_name
from raya.nodes.addons import LOAD_BALANCER_TYPE, ingress_balancer_name


@dataclass(frozen=True)
class Network:
    network: hcloud.Network
    subnet: hcloud.NetworkSubnet
    # The cloud controller attaches each load balancer it creates to this subnet
    # (HCLOUD_LOAD_BALANCERS_PRIVATE_SUBNET_IP_RANGE, raya.nodes.addons): it must exist first.
    balancer_subnet: hcloud.NetworkSubnet
    # Hetzner wants the network's numeric id where Pulumi holds a string: one output that
    # every server shares.
    network_id: pulumi.Output[int]


def define_network(config: StackConfig, labels: dict[str, str]) -> Network:
    network = hcloud.Network(
        "network",
        name=config.network_name,
        ip_range=str(config.network_range),
        labels=labels,
    )
    network_id = network.id.apply(int)
    subnet = _cloud_subnet("nodes", network_id, config, config.nodes_subnet, None)
    balancer_subnet = _cloud_subnet(
        "load-balancers", network_id, config, config.load_balancer_subnet, subnet
    )
    return Network(
        network=network, subnet=subnet, balancer_subnet=balancer_subnet, network_id=network_id
    )


def _cloud_subnet(
    resource: str,
    network_id: pulumi.Output[int],
    config: StackConfig,
    ip_range: ipaddress.IPv4Network,
    after: hcloud.NetworkSubnet | None,
) -> hcloud.NetworkSubnet:
    """A `cloud` subnet of the network in the location's zone, declared `after` the previous
    one: one change of the network after the other, never two at once."""
    return hcloud.NetworkSubnet(
        resource,
        network_id=network_id,
        type="cloud",
        network_zone=config.network_zone,
        ip_range=str(ip_range),
        opts=pulumi.ResourceOptions(depends_on=[after] if after is not None else []),
    )


def define_public_addresses(cluster: Cluster) -> dict[str, hcloud.PrimaryIp]:
    """The public mode's node addresses: a primary IPv4 per node, made before its server, so
    that the firewall rules name every node before any server exists. Kept when its server is
    re-created (a control plane's etcd member is known by it), and a control plane's is
    protected from deletion as its volume is."""
    config = cluster.config
    return {
        node.name: hcloud.PrimaryIp(
            f"{node.name}-ipv4",
            name=server_name(config.cluster_name, node.name),
            type="ipv4",
            assignee_type="server",
            # Not deleted with its server: a replacement takes the same address.
            auto_delete=False,
            location=node.location or config.location,
            labels={"managed_by": config.cluster_name, "role": node.role},
            opts=pulumi.ResourceOptions(protect=node.role == "control-plane"),
        )
        for node in cluster.nodes
    }


# What the cloud controller may change on a balancer of raya's once it has taken it
# (hetznercloud/hcloud-cloud-controller-manager v1.35.0, internal/hcops/load_balancer.go,
# `ReconcileHCLB`): its `hcloud-ccm/service-uid` label (`changeHCLBInfo` adds it, keeping
# the others), its name (`changeHCLBInfo`, to the Service's name annotation), its algorithm
# and type (`changeAlgorithm`, `changeType`, to the Service's annotations or the
# controller's defaults); it adds the targets and services (`ReconcileHCLBTargets`,
# `ReconcileHCLBServices`). Pulumi leaves those to it, so the two never undo each other. The
# location cannot change (Hetzner moves no balancer).
BALANCER_IGNORED = (
    'labels["hcloud-ccm/service-uid"]',
    "name",
    "algorithm",
    "loadBalancerType",
    "targets",
)


def define_balancers(config: StackConfig) -> dict[str, hcloud.LoadBalancer]:
    """The public mode's load balancers, by name: Traefik's (`INGRESS_BALANCER`, the Pulumi
    resource `ingress`) and each of `raya:loadBalancers` (`<name>-balancer`), made before any
    server so that their public IPv4 addresses are known to the firewalls, which admit the
    NodePorts from them alone. A Service names its balancer (Traefik's:
    `raya.nodes.addons.traefik_config`; the user's: the annotation docs/fleet.md gives) and
    the cloud controller takes it over: it looks a Service's balancer up by its
    `hcloud-ccm/service-uid` label, then by that name, and creates one only when neither
    finds it (v1.35.0, hcloud/load_balancers.go, `EnsureLoadBalancer`: "Import of load
    balancers which were created by other means"). `raya destroy` deletes them after the
    servers (their firewalls depend on their addresses), so no controller is left to
    re-create one; Hetzner deletes a balancer with the targets and services on it, as the
    controller itself does with one call (v1.35.0, internal/hcops/load_balancer.go, `Delete`,
    from `EnsureLoadBalancerDeleted`, removing nothing first)."""
    ingress = LoadBalancer(INGRESS_BALANCER, LOAD_BALANCER_TYPE, config.location)
    return {
        balancer.name: hcloud.LoadBalancer(
            "ingress" if balancer is ingress else f"{balancer.name}-balancer",
            name=ingress_balancer_name(config)
            if balancer is ingress
            else f"{config.cluster_name}-{balancer.name}",
            load_balancer_type=balancer.type,
            location=balancer.location,
            labels={"managed_by": config.cluster_name},
            opts=pulumi.ResourceOptions(ignore_changes=list(BALANCER_IGNORED)),
        )
        for balancer in (ingress, *config.load_balancers)
    }


def define_pool_subnets(cluster: Cluster, network: Network) -> dict[str, hcloud.NetworkSubnet]:
    """A cloud subnet per autoscaled pool, by pool name: the cluster autoscaler attaches the
    pool's servers with it as their IP range, and Hetzner picks each one's address inside it
    (kubernetes/autoscaler, cluster-autoscaler/cloudprovider/hetzner, hetzner_node_group.go,
    `createServer`; the range must be one of the network's subnets: `isIpRangeInNetwork`)."""
    subnets: dict[str, hcloud.NetworkSubnet] = {}
    after = network.balancer_subnet
    for pool in cluster.autoscaled:
        after = subnets[pool.name] = _cloud_subnet(
            f"{pool.name}-subnet", network.network_id, cluster.config, pool.addresses, after
        )
    return subnets
