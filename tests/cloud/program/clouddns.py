"""A model of Cloud DNS's API as IAM guards it, and of the calls the cluster's two DNS clients
make to it, in their order.

Written from Google's documentation and the clients' source, not from what raya grants:
- Each method needs a permission, checked on one resource (Cloud DNS "Roles and
  permissions", cloud.google.com/dns/docs/access-control, its method table):
  `managedZones.list` dns.managedZones.list "for the project", and its answer is the
  project's zones; `resourceRecordSets.list` dns.resourceRecordSets.list, `changes.get`
  dns.changes.get, on the managed zone; `changes.create` dns.changes.create, and for each
  record set it touches dns.resourceRecordSets.create (added), .delete (deleted) or .update
  (one record set both deleted and added by the change: its name and type) ("While
  dns.changes.create is the baseline permission required to invoke this method, additional
  permissions are checked depending on the specific additions or deletions contained in the
  payload", changes.create reference).
- Where a permission is held: a binding in the project's allow policy holds on the project and
  on every zone in it; a binding in a managed zone's own policy holds on that zone alone
  (IAM "Resource hierarchy": policies are inherited downwards; Cloud DNS "Set and manage IAM
  policies for managed zones", cloud.google.com/dns/docs/zones/iam-per-resource-zones). A
  project-level permission (dns.managedZones.list) in a zone's policy grants no list.
- A role grants exactly its permissions: a custom role its `includedPermissions` (IAM
  "Understanding custom roles"); predefined roles are not modelled (raya binds none).
- A refused call is HTTP 403 (googleapi: "Error 403: Forbidden"), and changes nothing.
- A change is `pending` when created and `done` once applied, later: `changes.get` reads its
  status (Cloud DNS API, `Change.status`: "pending" or "done"). A deletion must match a record
  set exactly, or the change is refused with 412 conditionNotMet; an addition of a name and
  type that exists (and is not deleted by the same change) with 409 alreadyExists.

- Custom roles' lifecycle (IAM `projects.roles.delete` reference; "Create and manage custom
  roles"): a deleted role can be undeleted for 7 days; then it is purged, and for the rest of
  37 days from the delete no role can be created with its id. The provider's create
  (terraform-provider-google `resourceGoogleProjectIamCustomRoleCreate`) reads the id
  first: a deleted role it undeletes and updates; an active one is an error ("already exists
  and must be imported"); otherwise it creates, which IAM refuses for a purged id within the
  37 days.

`calls` keeps every call answered, as `(caller, method, zone or project)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.cloud.program.mocks import Run, reveal

# Permissions the project's policy alone can grant (the method table: "for the project").
PROJECT_ONLY = frozenset({"dns.managedZones.list"})


class DnsError(Exception):
    """An HTTP error of the API, as googleapi reports it."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"googleapi: Error {status}: {message}, {reason}")
        self.status = status


@dataclass(frozen=True)
class RecordSet:
    name: str
    type: str
    ttl: int
    rrdatas: tuple[str, ...]


@dataclass
class Zone:
    name: str
    dns_name: str
    visibility: str = "public"
    records: dict[tuple[str, str], RecordSet] = field(default_factory=dict)


@dataclass
class Change:
    id: str
    zone: str
    additions: tuple[RecordSet, ...]
    deletions: tuple[RecordSet, ...]
    status: str = "pending"


@dataclass
class CloudDns:
    project: str
    zones: dict[str, Zone] = field(default_factory=dict)
    roles: dict[str, frozenset[str]] = field(default_factory=dict)  # role name -> permissions
    project_policy: list[tuple[str, str]] = field(default_factory=list)  # (role, member)
    zone_policies: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    changes: dict[str, Change] = field(default_factory=dict)
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    deleted_roles: dict[str, int] = field(default_factory=dict)  # role name -> day deleted

    # Custom roles, as the provider creates and deletes them; `day` is days since some origin.

    def create_role(self, role_id: str, permissions: Iterable[str], day: int) -> str:
        name = f"projects/{self.project}/roles/{role_id}"
        if name in self.roles:
            raise DnsError(409, "alreadyExists", f"Custom project role {name} already exists "
                           "and must be imported")  # fmt: skip
        deleted = self.deleted_roles.get(name)
        if deleted is not None and day - deleted < 37 and day - deleted >= 7:
            raise DnsError(409, "alreadyExists", f"role id {role_id} was used by a deleted role")
        self.deleted_roles.pop(name, None)  # undeleted, or its id free again
        self.roles[name] = frozenset(permissions)
        return name

    def delete_role(self, name: str, day: int) -> None:
        del self.roles[name]
        self.deleted_roles[name] = day

    # IAM

    def _held(self, caller: str, permission: str, zone: str | None) -> bool:
        bindings = list(self.project_policy)
        if zone is not None and permission not in PROJECT_ONLY:
            bindings += self.zone_policies.get(zone, [])
        return any(
            member == caller and permission in self.roles.get(role, frozenset())
            for role, member in bindings
        )

    def _require(self, caller: str, permissions: Iterable[str], zone: str | None) -> None:
        for permission in sorted(set(permissions)):
            if not self._held(caller, permission, zone):
                where = f"managed zone {zone}" if zone else f"project {self.project}"
                raise DnsError(
                    403,
                    "forbidden",
                    f"Forbidden: {caller} lacks {permission} on {where}",
                )

    def _zone(self, project: str, name: str) -> Zone:
        zone = self.zones.get(name) if project == self.project else None
        if zone is None:
            raise DnsError(404, "notFound", f"managed zone '{name}' does not exist")
        return zone

    # The API

    def managed_zones_list(
        self, caller: str, project: str, dns_name: str | None = None
    ) -> list[Zone]:
        self._require(caller, ["dns.managedZones.list"], None)
        self.calls.append((caller, "managedZones.list", project))
        return [z for z in self.zones.values() if dns_name is None or z.dns_name == dns_name]

    def rrsets_list(
        self,
        caller: str,
        project: str,
        zone: str,
        name: str | None = None,
        type_: str | None = None,
    ) -> list[RecordSet]:
        found = self._zone(project, zone)
        self._require(caller, ["dns.resourceRecordSets.list"], zone)
        self.calls.append((caller, "resourceRecordSets.list", zone))
        return [
            record
            for (record_name, record_type), record in sorted(found.records.items())
            if (name is None or record_name == name) and (type_ is None or record_type == type_)
        ]

    def changes_create(
        self,
        caller: str,
        project: str,
        zone: str,
        additions: Sequence[RecordSet] = (),
        deletions: Sequence[RecordSet] = (),
    ) -> Change:
        found = self._zone(project, zone)
        added = {(r.name, r.type) for r in additions}
        deleted = {(r.name, r.type) for r in deletions}
        needed = ["dns.changes.create"]
        needed += ["dns.resourceRecordSets.update"] * bool(added & deleted)
        needed += ["dns.resourceRecordSets.create"] * bool(added - deleted)
        needed += ["dns.resourceRecordSets.delete"] * bool(deleted - added)
        self._require(caller, needed, zone)
        for record in deletions:
            if found.records.get((record.name, record.type)) != record:
                raise DnsError(412, "conditionNotMet", f"deletion of {record.name} {record.type}")
        for record in additions:
            if (record.name, record.type) in found.records.keys() - deleted:
                raise DnsError(409, "alreadyExists", f"addition of {record.name} {record.type}")
            if not (record.name == found.dns_name or record.name.endswith("." + found.dns_name)):
                raise DnsError(400, "invalid", f"{record.name} is not in zone {found.dns_name}")
        change = Change(str(len(self.changes) + 1), zone, tuple(additions), tuple(deletions))
        self.changes[change.id] = change
        self.calls.append((caller, "changes.create", zone))
        return Change(**vars(change))  # what the answer said: `pending`

    def changes_get(self, caller: str, project: str, zone: str, change_id: str) -> Change:
        self._zone(project, zone)
        self._require(caller, ["dns.changes.get"], zone)
        self.calls.append((caller, "changes.get", zone))
        return Change(**vars(self.changes[change_id]))

    def settle(self) -> None:
        """Later: every pending change is applied."""
        for change in self.changes.values():
            if change.status == "pending":
                records = self.zones[change.zone].records
                for record in change.deletions:
                    del records[(record.name, record.type)]
                for record in change.additions:
                    records[(record.name, record.type)] = record
                change.status = "done"


def granted(api: CloudDns, run: Run) -> None:
    """Load what the program declared into `api`: its custom roles and their bindings, on the
    project and on managed zones (by the zone's name)."""

    def of(typ: str) -> list[dict[str, Any]]:
        return [{**reveal(r.inputs), **r.outputs} for r in run.resources.values() if r.typ == typ]

    for role in of("gcp:projects/iAMCustomRole:IAMCustomRole"):
        api.roles[role["name"]] = frozenset(role["permissions"])
    for binding in of("gcp:projects/iAMMember:IAMMember"):
        assert binding["project"] == api.project
        api.project_policy.append((binding["role"], binding["member"]))
    for binding in of("gcp:dns/dnsManagedZoneIamMember:DnsManagedZoneIamMember"):
        assert binding["project"] == api.project
        api.zone_policies.setdefault(binding["managedZone"], []).append(
            (binding["role"], binding["member"])
        )


# external-dns v0.14.0 (the app of chart 1.14.3), provider/google/google.go, with the values
# raya gives it (raya.nodes.addons.external_dns_values): --google-project, a domain filter of
# the cluster's zone, --google-zone-visibility=public.


def _domain_match(filters: Sequence[str], domain: str) -> bool:
    """endpoint/domain_filter.go, `matchFilter`."""
    stripped = domain.lower().removesuffix(".")
    for item in filters:
        if item.startswith(".") and stripped.endswith(item):
            return True
        if stripped.count(".") == item.count("."):
            if stripped == item:
                return True
        elif stripped.endswith("." + item):
            return True
    return False


def _external_dns_zones(
    api: CloudDns, caller: str, project: str, filters: Sequence[str]
) -> dict[str, Zone]:
    """`(*GoogleProvider).Zones`: list the project's zones, keep the public ones the domain
    filter matches."""
    return {
        zone.name: zone
        for zone in api.managed_zones_list(caller, project)
        if _domain_match(filters, zone.dns_name) and zone.visibility == "public"
    }


def external_dns_records(
    api: CloudDns, caller: str, project: str, filters: Sequence[str]
) -> list[RecordSet]:
    """`(*GoogleProvider).Records`: the zones, then each one's record sets."""
    found: list[RecordSet] = []
    for zone in _external_dns_zones(api, caller, project, filters):
        found += api.rrsets_list(caller, project, zone)
    return found


def external_dns_apply(
    api: CloudDns,
    caller: str,
    project: str,
    filters: Sequence[str],
    create: Sequence[RecordSet] = (),
    update_old: Sequence[RecordSet] = (),
    update_new: Sequence[RecordSet] = (),
    delete: Sequence[RecordSet] = (),
) -> None:
    """`(*GoogleProvider).ApplyChanges` -> `submitChange`: one change of the plan's records the
    domain filter matches, listed zones again, split per zone (`separateChange`, the longest
    zone name that is a suffix: provider/zonefinder.go `FindZone`), one changes.create each."""
    additions = [r for r in (*create, *update_new) if _domain_match(filters, r.name)]
    deletions = [r for r in (*update_old, *delete) if _domain_match(filters, r.name)]
    if not additions and not deletions:
        return
    zones = _external_dns_zones(api, caller, project, filters)

    def zone_of(record: RecordSet) -> str | None:
        suitable = [
            z
            for z in zones.values()
            if record.name == z.dns_name or record.name.endswith("." + z.dns_name)
        ]
        return max(suitable, key=lambda z: len(z.dns_name)).name if suitable else None

    for zone in zones:
        added = [r for r in additions if zone_of(r) == zone]
        deleted = [r for r in deletions if zone_of(r) == zone]
        if added or deleted:
            api.changes_create(caller, project, zone, added, deleted)


# cert-manager v1.18.2, pkg/issuer/acme/dns/clouddns/clouddns.go, with the issuer raya writes
# (raya.nodes.addons.cluster_issuer): `project` and `hostedZoneName` set, so `getHostedZone`
# returns the name without a call.


def _hosted_zone(api: CloudDns, caller: str, project: str, hosted_zone: str, fqdn: str) -> str:
    """`getHostedZone`: the issuer's zone when named; otherwise the project's zones whose DNS
    name is the domain's authoritative zone (found by DNS: here, the zone the name is in)."""
    if hosted_zone:
        return hosted_zone
    zones = [z for z in api.zones.values() if fqdn.endswith("." + z.dns_name)]
    auth = max(zones, key=lambda z: len(z.dns_name)).dns_name
    listed = api.managed_zones_list(caller, project, dns_name=auth)
    public = [z for z in listed if z.visibility == "public"]
    return (public or listed)[0].name


def cert_manager_present(
    api: CloudDns, caller: str, project: str, hosted_zone: str, fqdn: str, value: str
) -> None:
    """`Present`: the TXT record sets of the name, one change deleting them and adding the
    merged set, then a second's sleep and changes.get while the change is pending (Cloud DNS
    applies it meanwhile: `settle`)."""
    zone = _hosted_zone(api, caller, project, hosted_zone, fqdn)
    record = RecordSet(fqdn, "TXT", 60, (value,))
    existing = api.rrsets_list(caller, project, zone, name=fqdn, type_="TXT")
    for found in existing:
        if value in (data.strip('"') for data in found.rrdatas):
            return
        record = RecordSet(fqdn, "TXT", 60, (*record.rrdatas, *found.rrdatas))
    change = api.changes_create(caller, project, zone, [record], existing)
    while change.status == "pending":
        api.settle()
        change = api.changes_get(caller, project, zone, change.id)


def cert_manager_clean_up(
    api: CloudDns, caller: str, project: str, hosted_zone: str, fqdn: str, value: str
) -> None:
    """`CleanUp` -> `findTxtRecords`: every record set of the zone, then per TXT set of the name
    holding the value a change deleting it (and adding it back without the value)."""
    zone = _hosted_zone(api, caller, project, hosted_zone, fqdn)
    for found in api.rrsets_list(caller, project, zone):
        if found.type != "TXT" or found.name != fqdn:
            continue
        if value not in (data.strip('"') for data in found.rrdatas):
            continue
        kept = tuple(data for data in found.rrdatas if data.strip('"') != value)
        additions = [RecordSet(fqdn, "TXT", found.ttl, kept)] if kept else []
        api.changes_create(caller, project, zone, additions, [found])
