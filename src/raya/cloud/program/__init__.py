"""The Pulumi program (the spec's Terraform configuration): `Pulumi.yaml` runs `__main__.py`.

`define` declares every resource of a validated cluster and returns the stack outputs; it
takes the renderer and the users' keys as arguments so tests run it under Pulumi's mocks.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Set
from pathlib import Path
from typing import Any

import pulumi

from raya.cloud import kit as recovery
from raya.cloud.program.autoscaler import define_autoscaler
from raya.cloud.program.backups import BackupTarget, define_backups
from raya.cloud.program.cluster import Renderer, define_server, define_volume, find_snapshot
from raya.cloud.program.dns import define_records, define_zone, find_parent_zone
from raya.cloud.program.firewall import define_firewalls, firewall_layout
from raya.cloud.program.network import (
    define_balancers,
    define_network,
    define_pool_subnets,
    define_public_addresses,
)
from raya.cloud.program.outputs import gather
from raya.cloud.program.placement import (
    define_placement_groups,
    define_registration_balancer,
    spread_groups,
)
from raya.cloud.program.secrets import Identity, define_identity
from raya.defaults import GITHUB_URL
from raya.errors import DeployError
from raya.model.config import (
    AUTOSCALER_HCLOUD_TOKEN,
    CLUSTER_HCLOUD_TOKEN,
    KEYS,
    NAMESPACE,
    parse_stack_config,
)
from raya.model.fleet import Cluster, build_cluster, fleet_file, load_fleet
from raya.model.pins import ChartPin, Pins, load_chart_pins, load_pins
from raya.nodes.github_keys import fetch_keys
from raya.nodes.identity import CertificateAuthority
from raya.nodes.render import render_node

GITHUB_URL_ENV = "RAYA_GITHUB_URL"
# Nodes to re-create with the current inputs, comma-separated: set by `raya.cloud.deploy.run`.
REPLACE_ENV = "RAYA_REPLACE"


def stack_values() -> dict[str, Any]:
    """The `raya:` settings of the running stack as Pulumi hands them over, text (JSON for a
    list or mapping): `parse_stack_config` reads that text as Pulumi's typed getters do."""
    config = pulumi.Config(NAMESPACE)
    values = {key: config.get(key) for key in KEYS}
    return {key: value for key, value in values.items() if value is not None}


def load(root: Path, stack: str) -> tuple[Cluster, Pins]:
    """The running stack's cluster (its config, the fleet file) and the image pins."""
    config = parse_stack_config(stack_values(), source=f"stack {stack}")
    path = fleet_file(root)
    return build_cluster(config, load_fleet(path), str(path)), load_pins(root)


def define(
    cluster: Cluster,
    pins: Pins,
    render: Renderer,
    *,
    hcloud_token: pulumi.Input[str],
    replace: Set[str] = frozenset(),
    kit: recovery.RecoveryKit | None = None,
    autoscaler_token: pulumi.Input[str] | None = None,
    autoscaler_chart: ChartPin | None = None,
) -> dict[str, Any]:
    """Declare every resource; returns the stack outputs. `render` builds a node's config
    (`render_node` with the chart pins); `hcloud_token` is the cluster's own Hetzner token,
    which only the control plane's config carries (as a secret). The nodes named in
    `replace` take the current inputs whole, to be re-created with them; every other server
    keeps what it was created with and reports the difference as drift. With `kit`, the
    cluster's server token, agent secret, CA pairs and bucket are the kit's.
    `autoscaler_token` is the cluster autoscaler's Hetzner token, required with an autoscaled
    pool (its manifests are then the output `autoscaler`, a secret), with
    `autoscaler_chart`, the autoscaler chart's pin (`charts.pin`)."""
    config = cluster.config
    unknown = sorted(set(replace) - {node.name for node in cluster.nodes})
    if unknown:
        raise DeployError(
            f"replace: {', '.join(unknown)} is not a node of cluster {config.cluster_name}; "
            f"accepted: {', '.join(node.name for node in cluster.nodes)}"
        )
    if cluster.autoscaled and autoscaler_token is None:
        raise DeployError(
            f"{NAMESPACE}:{AUTOSCALER_HCLOUD_TOKEN} is not set, and the fleet has autoscaled "
            f"pools ({', '.join(pool.name for pool in cluster.autoscaled)}); accepted: a "
            f"Hetzner Cloud API token set with `pulumi config set --secret "
            f"{NAMESPACE}:{AUTOSCALER_HCLOUD_TOKEN} <token>`"
        )
    if cluster.autoscaled and autoscaler_chart is None:
        raise DeployError("the fleet has autoscaled pools, but no cluster-autoscaler chart pin")
    # Hetzner's limits and the look-ups first: the engine starts creating a resource as soon
    # as it is declared, so a fleet past a limit, a missing snapshot or parent zone must fail
    # before the first declaration.
    layout = firewall_layout(cluster)
    placement = spread_groups(cluster)
    images = {
        architecture: find_snapshot(pins, config.cluster_name, architecture)
        for architecture in sorted({node.architecture for node in cluster.nodes})
    }
    parent_zone = find_parent_zone(config.parent_zone)
    network = None if config.public else define_network(config, {"managed_by": config.cluster_name})
    if network is not None:
        define_pool_subnets(cluster, network)
    addresses = define_public_addresses(cluster) if config.public else {}
    balancers = define_balancers(config) if config.public else {}
    firewalls = define_firewalls(
        cluster,
        layout,
        {name: ip.ip_address for name, ip in addresses.items()},
        {name: balancer.ipv4 for name, balancer in balancers.items()},
    )
    zone = define_zone(cluster, parent_zone)
    identity = define_identity(
        config, [node.name for node in cluster.nodes], hcloud_token, zone, kit
    )
    volumes = {node.name: define_volume(cluster, node) for node in cluster.control_planes}
    groups = define_placement_groups(cluster, placement)
    if network is not None:
        define_registration_balancer(cluster, network)
    backups = define_backups(config, kit)
    defined = {
        node.name: define_server(
            cluster,
            node,
            images[node.architecture],
            network,
            firewalls,
            identity.control_plane_secrets(node.name, backups.store())
            if node.role == "control-plane"
            else identity.agent_secrets(node.name),
            render,
            address=addresses.get(node.name),
            volume=volumes.get(node.name),
            placement_group=groups.get(node.name),
            replace=node.name in replace,
        )
        for node in cluster.nodes
    }
    servers = {name: server.server for name, server in defined.items()}
    # The public mode's addresses are known before the servers: the names resolve first.
    define_records(
        cluster,
        zone,
        {
            name: addresses[name].ip_address if name in addresses else server.ipv4_address
            for name, server in servers.items()
        },
    )
    autoscaler: dict[str, Any] = (
        {"autoscaler": define_autoscaler(
            cluster, pins, autoscaler_chart, identity, autoscaler_token
        )}
        if cluster.autoscaled and autoscaler_token is not None and autoscaler_chart is not None
        else {}
    )
    return {
        **autoscaler,
        "zone": config.zone_dns_name,
        "nameServers": zone.name_servers,
        "kubeconfig": identity.kubeconfig,
        # Where the snapshots are, and the keys `raya backups` reads them with: a secret.
        "backups": backups.outputs(identity.join_secret),
        # What `raya up` writes to the recovery kit's file (raya.cloud.kit): a secret.
        "recoveryKit": _recovery_kit(config.cluster_name, identity, backups),
        "servers": {
            node.name: {
                "serverId": servers[node.name].id,
                "dnsName": cluster.dns_name(node),
                "privateIp": str(node.private_ip),
                # The address k3s registers the node with (its InternalIP, an API server's
                # endpoint): the private one, or in the public mode its primary IP.
                "nodeIp": addresses[node.name].ip_address
                if node.name in addresses
                else str(node.private_ip),
                "ipv4": servers[node.name].ipv4_address,
                "ipv6": servers[node.name].ipv6_address,
                # Public: what `raya ssh` pins the node's identity to.
                "hostKey": identity.host_keys[node.name].public_key_openssh,
            }
            for node in cluster.nodes
        },
        # Per node, what it runs that differs from what the inputs render (none: in sync).
        "drift": gather(*(server.drift for server in defined.values())).apply(
            lambda drifts: {
                name: list(parts) for name, parts in zip(defined, drifts, strict=True) if parts
            }
        ),
    }


def _recovery_kit(
    cluster_name: str, identity: Identity, backups: BackupTarget
) -> pulumi.Output[dict[str, Any]]:
    values = gather(
        identity.join_secret,
        identity.agent_secret,
        identity.server_ca.cert_pem,
        identity.server_ca.key_pem,
        identity.client_ca.cert_pem,
        identity.client_ca.key_pem,
        backups.kit(identity.join_secret),
    )
    return pulumi.Output.secret(
        values.apply(
            lambda v: recovery.document(
                recovery.RecoveryKit(
                    cluster_name=cluster_name,
                    join_secret=v[0],
                    agent_secret=v[1],
                    server_ca=CertificateAuthority(cert_pem=v[2], key_pem=v[3]),
                    client_ca=CertificateAuthority(cert_pem=v[4], key_pem=v[5]),
                    backups=v[6],
                )
            )
        )
    )


def main(root: Path) -> None:
    """The program as Pulumi runs it: read the stack, check every user has a key, declare,
    export. The nodes fetch the keys themselves at boot: none is in their config."""
    cluster, pins = load(root, pulumi.get_stack())
    source = cluster.config.from_recovery_kit
    # A kit that is not this cluster's fails here, before anything is declared.
    kit = recovery.load(recovery.resolve(root, source), cluster.config) if source else None
    # A handle without a valid key (a typo) fails here, before anything is declared.
    fetch_keys(cluster.config.authorized_users, os.environ.get(GITHUB_URL_ENV, GITHUB_URL))
    replace = frozenset(filter(None, os.environ.get(REPLACE_ENV, "").split(",")))
    charts = load_chart_pins(root)
    render = functools.partial(render_node, charts=charts)
    token = pulumi.Config(NAMESPACE).require_secret(CLUSTER_HCLOUD_TOKEN)
    autoscaler_token = (
        pulumi.Config(NAMESPACE).require_secret(AUTOSCALER_HCLOUD_TOKEN)
        if cluster.autoscaled
        else None
    )
    outputs = define(
        cluster,
        pins,
        render,
        hcloud_token=token,
        replace=replace,
        kit=kit,
        autoscaler_token=autoscaler_token,
        autoscaler_chart=charts.cluster_autoscaler,
    )
    for name, value in outputs.items():
        pulumi.export(name, value)
