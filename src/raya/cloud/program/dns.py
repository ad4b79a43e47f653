"""The spec's `dns.tf`: the cluster's zone, its delegation in the parent zone, node records."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import pulumi
import pulumi_gcp as gcp

from raya.errors import DeployError
from raya.model.fleet import Cluster

TTL = 300  # short: a re-created server's new address is seen within minutes
_ZONE_NAME_MAX = 63


def zone_resource_name(dns_name: str) -> str:
    """A Cloud DNS zone name (1-63 of a-z 0-9 -, a letter first) for `dns_name`:
    `raya.example.com.` becomes `raya-example-com`."""
    name = dns_name.rstrip(".").replace(".", "-")
    if not name[0].isalpha():
        name = f"z-{name}"
    if len(name) > _ZONE_NAME_MAX:
        digest = hashlib.sha256(dns_name.encode()).hexdigest()[:8]
        name = f"{name[: _ZONE_NAME_MAX - len(digest) - 1].rstrip('-')}-{digest}"
    return name


def find_parent_zone(parent_dns_name: str) -> str:
    """The name of the project's one zone whose DNS name is `parent_dns_name`."""
    zones = gcp.dns.get_managed_zones().managed_zones
    names = sorted(zone.name for zone in zones if zone.dns_name == parent_dns_name and zone.name)
    if len(names) != 1:
        found = f"{len(names)} ({', '.join(names)})" if names else "none"
        raise DeployError(
            f"raya:parentZone {parent_dns_name}: expected exactly one Cloud DNS zone with this "
            f"DNS name in the Google Cloud project, found {found}"
        )
    return names[0]


def define_zone(cluster: Cluster, parent: str) -> gcp.dns.ManagedZone:
    """The cluster's zone, delegated from the parent zone named `parent`."""
    config = cluster.config
    zone = gcp.dns.ManagedZone(
        "primary",
        name=zone_resource_name(config.zone_dns_name),
        dns_name=config.zone_dns_name,
        description=f"Names of the {config.cluster_name} cluster",
        labels={"managed_by": config.cluster_name},
        # The zone is the cluster's alone, and external-dns adds records Pulumi does not
        # know of: without this, `raya destroy` could never delete it.
        force_destroy=True,
    )
    gcp.dns.RecordSet(
        "delegation",
        managed_zone=parent,
        name=config.zone_dns_name,
        type="NS",
        ttl=TTL,
        rrdatas=zone.name_servers,
    )
    return zone


def define_records(
    cluster: Cluster, zone: gcp.dns.ManagedZone, addresses: Mapping[str, pulumi.Input[str]]
) -> None:
    """A record per node (`cp`, `cp<k>`, `a<i>`, `<pool>-<i>`) to its public IPv4 address
    (`addresses`, by node name: its server's, or in the public mode its primary IP's, known
    before the server, so that the names resolve before any node asks them); `cp`, the API's
    name, holds every control plane's: clients (Go's and urllib3's dialers) try the next
    address when one does not answer, so the name works while any one is down. Each record's
    resource is named by its label, but a pool node's label is its node name, which its
    server's resource has already: its record's is `<label>-record`."""
    for node in cluster.nodes:
        holders = cluster.control_planes if node == cluster.control_plane else (node,)
        gcp.dns.RecordSet(
            node.dns_label if node.pool is None else f"{node.dns_label}-record",
            managed_zone=zone.name,
            name=cluster.dns_name(node),
            type="A",
            ttl=TTL,
            rrdatas=[addresses[holder.name] for holder in holders],
        )
