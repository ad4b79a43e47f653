"""The spec's `dns.tf`: the cluster's zone, its delegation in the parent zone, node records,
and what the cluster's two DNS identities may do in Cloud DNS.

external-dns and cert-manager each hold a service account key on the control plane. Each
account may change records in the cluster's zone alone: a custom role of the record
permissions their calls need, bound on that zone (Cloud DNS takes IAM policies per managed
zone, cloud.google.com/dns/docs/zones/iam-per-resource-zones). Listing zones is a project
permission (Cloud DNS "Roles and permissions": dns.managedZones.list "for the project"):
external-dns lists them on every sync, so its account alone also holds a second custom role,
dns.managedZones.list and nothing else, on the project. cert-manager's issuers name the zone
(`hostedZoneName`), so it never lists. Predefined roles would give more: roles/dns.admin on
the zone can delete it and set its IAM policy; roles/dns.reader on the project reads every
zone's records, private zones and the parent zone included (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_gcp as gcp
import pulumi_random as random

from raya.errors import DeployError
from raya.model.config import StackConfig
from raya.model.fleet import Cluster

TTL = 300  # short: a re-created server's new address is seen within minutes
# The Cloud DNS calls external-dns (kubernetes-sigs/external-dns v0.14.0, the chart's app,
# provider/google/google.go: `Records`, `submitChange`) and cert-manager's solver
# (cert-manager v1.18.2, pkg/issuer/acme/dns/clouddns/clouddns.go: `Present`, `CleanUp`,
# `findTxtRecords`) make in the zone, and the permission each needs (Cloud DNS "Roles and
# permissions", the method table): resourceRecordSets.list -> dns.resourceRecordSets.list;
# changes.create -> dns.changes.create, with dns.resourceRecordSets.create for what it adds,
# .delete for what it deletes, .update for a record set it replaces; changes.get (cert-manager
# waits for its change) -> dns.changes.get.
RECORD_PERMISSIONS = (
    "dns.changes.create",
    "dns.changes.get",
    "dns.resourceRecordSets.create",
    "dns.resourceRecordSets.delete",
    "dns.resourceRecordSets.list",
    "dns.resourceRecordSets.update",
)
# external-dns' `Zones` (same file) lists the project's zones before each read and change.
ZONE_LIST_PERMISSIONS = ("dns.managedZones.list",)
ZONE_LISTERS = ("external-dns",)


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
        name=config.zone_name,
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


def role_id(cluster_name: str, purpose: str, suffix: str) -> str:
    """A custom role's id (3-64 of letters, digits, `_` and `.`): the cluster's name, the
    role's purpose and a random suffix. IAM keeps a deleted role's id for up to 37 days
    ("Create and manage custom roles": the first 7 it can be undeleted, then it is purged but
    its id stays taken), so a stack destroyed then deployed again needs new ids: the suffix is
    a `random.RandomId`, which a destroy deletes with the roles."""
    return f"{cluster_name.replace('-', '_')}_{purpose}_{suffix}"


def define_dns_access(
    config: StackConfig,
    zone: gcp.dns.ManagedZone,
    accounts: Mapping[str, gcp.serviceaccount.Account],
) -> None:
    """What each DNS account (by purpose: `external-dns`, `cert-manager`) may do: change
    records in `zone` alone; list the project's zones, for those in ZONE_LISTERS."""
    name = config.cluster_name
    suffix = random.RandomId("dns-roles", byte_length=4)

    def custom_role(resource: str, purpose: str, title: str, permissions: tuple[str, ...]) -> (
        gcp.projects.IAMCustomRole
    ):
        return gcp.projects.IAMCustomRole(
            resource,
            project=zone.project,
            role_id=suffix.hex.apply(lambda hex_: role_id(name, purpose, hex_)),
            title=f"{name} {title}",
            description=f"{title} of the {name} cluster, in zone {config.zone_name} (raya)",
            permissions=list(permissions),
        )

    records = custom_role("dns-records", "dnsRecords", "DNS records", RECORD_PERMISSIONS)
    lister = custom_role("dns-zone-list", "dnsZoneList", "DNS zone list", ZONE_LIST_PERMISSIONS)
    for purpose, account in accounts.items():
        gcp.dns.DnsManagedZoneIamMember(
            f"{purpose}-dns-records",
            project=zone.project,
            managed_zone=zone.name,
            role=records.name,
            member=account.member,
        )
        if purpose in ZONE_LISTERS:
            gcp.projects.IAMMember(
                f"{purpose}-dns-zone-list",
                project=zone.project,
                role=lister.name,
                member=account.member,
            )
