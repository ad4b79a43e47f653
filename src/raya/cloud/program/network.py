"""The spec's `network.tf`: the private network and its `nodes` cloud subnet."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_hcloud as hcloud

from raya.model.config import StackConfig


@dataclass(frozen=True)
class Network:
    network: hcloud.Network
    subnet: hcloud.NetworkSubnet

    @property
    def network_id(self) -> pulumi.Output[int]:
        """Hetzner wants the network's numeric id where Pulumi holds a string."""
        return self.network.id.apply(int)


def define_network(config: StackConfig, labels: dict[str, str]) -> Network:
    network = hcloud.Network(
        "network",
        name=config.network_name,
        ip_range=str(config.network_range),
        labels=labels,
    )
    subnet = hcloud.NetworkSubnet(
        "nodes",
        network_id=network.id.apply(int),
        type="cloud",
        network_zone=config.network_zone,
        ip_range=str(config.nodes_subnet),
    )
    return Network(network=network, subnet=subnet)
