"""The spec's `network.tf`: the private network and its `nodes` cloud subnet."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_hcloud as hcloud

from raya.model.config import StackConfig
from raya.model.fleet import Cluster


@dataclass(frozen=True)
class Network:
    network: hcloud.Network
    subnet: hcloud.NetworkSubnet
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
    subnet = hcloud.NetworkSubnet(
        "nodes",
        network_id=network_id,
        type="cloud",
        network_zone=config.network_zone,
        ip_range=str(config.nodes_subnet),
    )
    return Network(network=network, subnet=subnet, network_id=network_id)


def define_pool_subnets(cluster: Cluster, network: Network) -> dict[str, hcloud.NetworkSubnet]:
    """A cloud subnet per autoscaled pool, by pool name: the cluster autoscaler attaches the
    pool's servers with it as their IP range, and Hetzner picks each one's address inside it
    (kubernetes/autoscaler, cluster-autoscaler/cloudprovider/hetzner, hetzner_node_group.go,
    `createServer`; the range must be one of the network's subnets: `isIpRangeInNetwork`)."""
    return {
        pool.name: hcloud.NetworkSubnet(
            f"{pool.name}-subnet",
            network_id=network.network_id,
            type="cloud",
            network_zone=cluster.config.network_zone,
            ip_range=str(pool.addresses),
        )
        for pool in cluster.autoscaled
    }
