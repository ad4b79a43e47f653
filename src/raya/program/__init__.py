"""The Pulumi program (the spec's Terraform configuration): `Pulumi.yaml` runs `__main__.py`.

`define` declares every resource of a validated cluster and returns the stack outputs; it
takes the renderer and the users' keys as arguments so tests run it under Pulumi's mocks.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pulumi

from raya.config import KEYS, NAMESPACE, parse_stack_config
from raya.fleet import Cluster, build_cluster, fleet_file, load_fleet
from raya.github_keys import GITHUB_URL, UserKeys, fetch_keys
from raya.pins import Pins, load_chart_pins, load_pins
from raya.program.cluster import Renderer, define_server, find_snapshot
from raya.program.dns import define_records, define_zone, find_parent_zone
from raya.program.network import define_network
from raya.program.secrets import define_identity
from raya.render import render_node

# Settings that are lists in the stack file: Pulumi hands them over as JSON text.
_OBJECT_KEYS = frozenset({"authorizedUsers"})
GITHUB_URL_ENV = "RAYA_GITHUB_URL"


def stack_values() -> dict[str, Any]:
    """The `raya:` settings of the running stack, as `parse_stack_config` takes them."""
    config = pulumi.Config(NAMESPACE)
    values = {
        key: config.get_object(key) if key in _OBJECT_KEYS else config.get(key) for key in KEYS
    }
    return {key: value for key, value in values.items() if value is not None}


def load(root: Path, stack: str) -> tuple[Cluster, Pins]:
    """The running stack's cluster (its config, the fleet file) and the image pins."""
    config = parse_stack_config(stack_values(), source=f"stack {stack}")
    path = fleet_file(root)
    return build_cluster(config, load_fleet(path), str(path)), load_pins(root)


def define(
    cluster: Cluster,
    pins: Pins,
    users: Sequence[UserKeys],
    render: Renderer,
) -> dict[str, Any]:
    """Declare every resource; returns the stack outputs. `render` builds a node's config
    (`render_node` with the chart pins and where the keys are fetched from)."""
    config = cluster.config
    # Look-ups first: the engine starts creating a resource as soon as it is declared, so a
    # missing snapshot or parent zone must fail before the first declaration.
    image = find_snapshot(pins, config.cluster_name)
    parent_zone = find_parent_zone(config.parent_zone)
    network = define_network(config, {"managed_by": config.cluster_name})
    zone = define_zone(cluster, parent_zone)
    identity = define_identity(config)
    control_plane_secrets = identity.control_plane_secrets()
    agent_secrets = identity.agent_secrets()
    servers = {
        node.name: define_server(
            cluster,
            node,
            image,
            network,
            control_plane_secrets if node.role == "control-plane" else agent_secrets,
            users,
            render,
        )
        for node in cluster.nodes
    }
    define_records(cluster, zone, servers)
    return {
        "zone": config.zone_dns_name,
        "nameServers": zone.name_servers,
        "servers": {
            node.name: {
                "dnsName": cluster.dns_name(node),
                "privateIp": str(node.private_ip),
                "ipv4": servers[node.name].ipv4_address,
                "ipv6": servers[node.name].ipv6_address,
            }
            for node in cluster.nodes
        },
    }


def main(root: Path) -> None:
    """The program as Pulumi runs it: read the stack, fetch the keys, declare, export."""
    cluster, pins = load(root, pulumi.get_stack())
    keys_url = os.environ.get(GITHUB_URL_ENV, GITHUB_URL)
    users = fetch_keys(cluster.config.authorized_users, keys_url)
    # Keys too many to inline are fetched at boot from the same place, pinned by hash.
    render = functools.partial(render_node, charts=load_chart_pins(root), keys_base_url=keys_url)
    for name, value in define(cluster, pins, users, render).items():
        pulumi.export(name, value)
